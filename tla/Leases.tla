------------------------------- MODULE Leases --------------------------------
(***************************************************************************)
(* Scale-out on PostgreSQL (issue 13, docs/scale-out.md): worker           *)
(* processes share one database; a conversation tree is worked by the one  *)
(* worker holding its LEASE (owner, epoch, expires_at).                    *)
(*                                                                         *)
(* A worker CLAIMS a tree whose lease is free or expired: the epoch goes   *)
(* up by one, and the claim opens the tree exactly like a restart (a tool  *)
(* found at its `execute` intent with no result is not re-run: it is       *)
(* answered "interrupted"; that answer is the claimer's first commit). The *)
(* claimer also draws a FRESH ID BLOCK from a database sequence: every id  *)
(* it allocates for the tree comes from that block, so ids never collide   *)
(* across workers and keep increasing within the tree after a takeover.    *)
(* Every commit is FENCED: in the same transaction it checks that the      *)
(* lease row still carries the committer's epoch; if not, nothing is       *)
(* written and the worker gets LeaseLost and drops the tree.               *)
(*                                                                         *)
(* Time passes by `Tick`; a worker that takes no step while time passes is *)
(* PAUSED (SIGSTOP, a long GC, a partition): it still believes it holds    *)
(* the lease. A worker may also CRASH (SIGKILL): its memory is gone, the   *)
(* lease stays until it expires. The database is the only shared state.    *)
(*                                                                         *)
(* One tree is modelled; its durable history is `log`, the commits in      *)
(* order. One unsafe tool call is modelled by `tool`: none -> intent (the  *)
(* execute intent is committed; the body may start) -> done (its result)   *)
(* or interrupted (a takeover found the intent without a result).          *)
(*                                                                         *)
(* Known-bad variants (`Bug`): "unfenced" commits when the worker believes *)
(* it holds the lease, without the epoch check; "worker_block" draws ids   *)
(* from one block per worker process instead of one per claim; "rerun"    *)
(* re-runs a tool found at its intent on takeover.                         *)
(***************************************************************************)
EXTENDS Naturals, Sequences, FiniteSets

CONSTANTS
    Workers,      \* the worker processes: 1..n
    LeaseLen,     \* lease duration, in ticks
    MaxTime,      \* bound on the clock
    MaxCommits,   \* bound on the number of commits
    BlockSize,    \* ids per block
    Bug           \* "none" | "unfenced" | "worker_block" | "rerun"

None == 0  \* no owner (workers are 1..n)

VARIABLES
    now,        \* the clock (database time)
    lease,      \* the lease row: [owner, epoch, expires]
    nextBlock,  \* the id-block sequence (nextval)
    log,        \* the tree's commits, in order: [w, epoch, id]
    tool,       \* "none" | "intent" | "done" | "interrupted"
    intentBy,   \* the epoch that committed the tool's intent (0: none)
    bodyRuns,   \* how many times the unsafe tool body started
    local       \* each worker's memory: [held, epoch, block, used, ran]

vars == <<now, lease, nextBlock, log, tool, intentBy, bodyRuns, local>>

Gone == [held |-> FALSE, epoch |-> 0, block |-> 0, used |-> 0, ran |-> FALSE]

\* The "worker_block" variant's block: one per worker process, its number.
Index(w) == w

TypeOK ==
    /\ now \in 0..MaxTime
    /\ lease.owner \in Workers \cup {None}
    /\ lease.epoch \in Nat /\ lease.expires \in Nat
    /\ tool \in {"none", "intent", "done", "interrupted"}
    /\ bodyRuns \in Nat
    /\ \A w \in Workers : local[w].held \in BOOLEAN /\ local[w].ran \in BOOLEAN

Init ==
    /\ now = 0
    /\ lease = [owner |-> None, epoch |-> 0, expires |-> 0]
    /\ nextBlock = Cardinality(Workers) + 1  \* above every per-worker block
    /\ log = <<>>
    /\ tool = "none"
    /\ intentBy = 0
    /\ bodyRuns = 0
    /\ local = [w \in Workers |-> Gone]

\* The fence, checked in the commit's own transaction.
Fenced(w) == IF Bug = "unfenced" THEN local[w].held ELSE lease.epoch = local[w].epoch

NextId(w) == local[w].block * BlockSize + local[w].used

Record(w) == [w |-> w, epoch |-> local[w].epoch, id |-> NextId(w)]

CanCommit(w) ==
    /\ local[w].held
    /\ Fenced(w)
    /\ Len(log) < MaxCommits
    /\ local[w].used < BlockSize

Tick ==
    /\ now < MaxTime
    /\ now' = now + 1
    /\ UNCHANGED <<lease, nextBlock, log, tool, intentBy, bodyRuns, local>>

\* SELECT ... FOR UPDATE SKIP LOCKED on a free or expired lease; epoch + 1;
\* a fresh id block; the tree opened like a restart, whose recovery answers
\* a tool stranded at its intent (the claimer's first, fenced, commit).
Claim(w) ==
    /\ ~local[w].held
    /\ lease.owner = None \/ lease.expires <= now
    /\ Len(log) < MaxCommits
    /\ LET epoch == lease.epoch + 1
           block == IF Bug = "worker_block" THEN Index(w) ELSE nextBlock
           me == [held |-> TRUE, epoch |-> epoch, block |-> block, used |-> 0, ran |-> FALSE]
           stranded == tool = "intent"
       IN /\ lease' = [owner |-> w, epoch |-> epoch, expires |-> now + LeaseLen]
          /\ nextBlock' = IF Bug = "worker_block" THEN nextBlock ELSE nextBlock + 1
          /\ IF stranded /\ Bug # "rerun"
               THEN /\ tool' = "interrupted"
                    /\ log' = Append(log, [w |-> w, epoch |-> epoch, id |-> block * BlockSize])
                    /\ local' = [local EXCEPT ![w] = [me EXCEPT !.used = 1]]
               ELSE /\ UNCHANGED <<tool, log>>
                    /\ local' = [local EXCEPT ![w] = me]
    /\ UNCHANGED <<now, intentBy, bodyRuns>>

\* Renewal: its own transaction, fenced like a commit.
Renew(w) ==
    /\ local[w].held
    /\ lease.owner = w /\ lease.epoch = local[w].epoch
    /\ lease' = [lease EXCEPT !.expires = now + LeaseLen]
    /\ UNCHANGED <<now, nextBlock, log, tool, intentBy, bodyRuns, local>>

\* A fenced-out commit (or renewal) raises LeaseLost: the worker drops the tree.
LoseLease(w) ==
    /\ local[w].held
    /\ lease.epoch # local[w].epoch
    /\ local' = [local EXCEPT ![w] = Gone]
    /\ UNCHANGED <<now, lease, nextBlock, log, tool, intentBy, bodyRuns>>

\* Any other step of the tree (a model turn, an entry): one fenced commit.
CommitStep(w) ==
    /\ CanCommit(w)
    /\ log' = Append(log, Record(w))
    /\ local' = [local EXCEPT ![w].used = @ + 1]
    /\ UNCHANGED <<now, lease, nextBlock, tool, intentBy, bodyRuns>>

\* The round's commit: the unsafe tool's execute intent.
CommitIntent(w) ==
    /\ CanCommit(w)
    /\ tool = "none"
    /\ tool' = "intent"
    /\ intentBy' = local[w].epoch
    /\ log' = Append(log, Record(w))
    /\ local' = [local EXCEPT ![w].used = @ + 1]
    /\ UNCHANGED <<now, lease, nextBlock, bodyRuns>>

\* The body starts after its intent is durable, by the worker that committed
\* it (no database check: a paused worker may start it late). Under "rerun",
\* a claimer that found the intent starts it again.
StartBody(w) ==
    /\ local[w].held
    /\ ~local[w].ran
    /\ tool = "intent"
    /\ intentBy = local[w].epoch \/ (Bug = "rerun" /\ intentBy < local[w].epoch)
    /\ bodyRuns' = bodyRuns + 1
    /\ local' = [local EXCEPT ![w].ran = TRUE]
    /\ UNCHANGED <<now, lease, nextBlock, log, tool, intentBy>>

\* The tool's result: committed only if the fence still holds.
CommitResult(w) ==
    /\ CanCommit(w)
    /\ local[w].ran
    /\ tool = "intent"
    /\ tool' = "done"
    /\ log' = Append(log, Record(w))
    /\ local' = [local EXCEPT ![w].used = @ + 1]
    /\ UNCHANGED <<now, lease, nextBlock, intentBy, bodyRuns>>

\* SIGKILL: memory gone; the lease row stays until it expires.
Crash(w) ==
    /\ local[w].held
    /\ local' = [local EXCEPT ![w] = Gone]
    /\ UNCHANGED <<now, lease, nextBlock, log, tool, intentBy, bodyRuns>>

Next ==
    \/ Tick
    \/ \E w \in Workers :
        \/ Claim(w) \/ Renew(w) \/ LoseLease(w) \/ Crash(w)
        \/ CommitStep(w) \/ CommitIntent(w) \/ StartBody(w) \/ CommitResult(w)

Spec == Init /\ [][Next]_vars

(***************************************************************************)
(* Invariants (specs/scale-out.md; checked against the chaos test's        *)
(* commit log by tests/invariants.py under the same names).                *)
(***************************************************************************)

\* No commit of an older epoch lands after one of a newer epoch: a worker
\* whose lease was taken never commits again.
CommitsAreFenced ==
    \A i, j \in 1..Len(log) : i < j => log[i].epoch <= log[j].epoch

\* One epoch, one worker.
OneWriterPerEpoch ==
    \A i, j \in 1..Len(log) : log[i].epoch = log[j].epoch => log[i].w = log[j].w

\* Ids are unique and increase within the tree, across takeovers.
TreeIdsIncrease ==
    \A i, j \in 1..Len(log) : i < j => log[i].id < log[j].id

\* An unsafe tool body starts at most once, whoever holds the tree.
UnsafeBodyRunsAtMostOnceAcrossWorkers == bodyRuns <= 1

=============================================================================
