------------------------------ MODULE MCLeases ------------------------------
(***************************************************************************)
(* The bounds TLC checks Leases at (MCLeases.cfg), and the known-bad       *)
(* variants that must fail (MCLeasesUnfenced.cfg, MCLeasesWorkerBlock.cfg, *)
(* MCLeasesRerun.cfg). Numbers: tla/README.md.                             *)
(***************************************************************************)
EXTENDS Leases
=============================================================================
