------------------------------ MODULE MCDurable ------------------------------
(***************************************************************************)
(* The bounds TLC checks Durable at (MCDurable.cfg), and the two known-bad *)
(* variants that must fail (MCDurableActBeforeCommit.cfg,                  *)
(* MCDurableReplayUnsafe.cfg). Numbers: tla/README.md.                     *)
(***************************************************************************)
EXTENDS Durable
=============================================================================
