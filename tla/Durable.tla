------------------------------- MODULE Durable -------------------------------
(***************************************************************************)
(* pidurable's submission/task protocol, with crash and recovery.          *)
(*                                                                         *)
(* A host submits inputs to conversations. An input on an idle             *)
(* conversation is PLACED: it gets a user entry and starts a RUN, worked   *)
(* by a GENERATION task (one model turn). Input arriving while the         *)
(* conversation is busy is QUEUED in its inbox, as a follow-up (placed     *)
(* when the run answers: the final boundary) or a steer (placed when a     *)
(* tool round ends: the post-tools boundary). A model turn answers (the    *)
(* run's inputs are DONE), fails (UNANSWERED), or calls tools: one TOOL    *)
(* task per call, created with the assistant entry in one commit; when     *)
(* every tool task is terminal the generation hands the run over to a new  *)
(* generation. An abort marks the conversation's live tasks and withdraws  *)
(* its queued inputs; marked tasks settle bottom-up (tools first).         *)
(*                                                                         *)
(* The process is the pure core (`mem`: its state after its last step)    *)
(* plus the shell, which executes each step's effects in order: a COMMIT  *)
(* makes `mem` durable in `store`; acts start invocations (a model call,  *)
(* a tool body) that report back as later events. The core puts the       *)
(* commit of an intent before the act that needs it (`[Commit, RunTool]`). *)
(* The process may die at any effect boundary: `Crash` keeps `store` and   *)
(* nothing else; `Recover` (the shell's open) turns running tasks back     *)
(* into pending ones, checkpoints unchanged, and the ordinary scheduling   *)
(* continues from the checkpoints: a tool found at `execute` is re-run     *)
(* only if its stored AND its current replay are `safe`, otherwise it is   *)
(* answered "interrupted, may have partially run".                         *)
(*                                                                         *)
(* Each action is one step of `pidurable.core.step` (an event and the      *)
(* reservation it leads to); tla/README.md maps actions to the rows of     *)
(* core/ and the invariants to tests/invariants.py, where the same names   *)
(* are checked against the real shell at every crash point.                *)
(*                                                                         *)
(* Not modelled: compaction, custom tasks, sub-agent conversations,        *)
(* sequential batches, retries and deferred polls, passive writes,         *)
(* documents, hooks (an abort runs no on_abort hook, so no task is held    *)
(* `completing`). `Bug` switches on a known-bad variant that must fail.    *)
(***************************************************************************)
EXTENDS Naturals, Sequences, FiniteSets

CONSTANTS
    NConv,       \* conversations 1..NConv
    NInputs,     \* host inputs 1..NInputs; input i belongs to ConvOf(i)
    Tools,       \* the tool names a model may call
    MaxBatch,    \* calls in one tool round (a parallel batch)
    MaxRounds,   \* tool rounds in a whole behaviour
    MaxCrashes,  \* process deaths in a whole behaviour
    MaxAborts,   \* host aborts in a whole behaviour
    Bug          \* "none", or a known-bad variant (see ToolActs, ReplayAllows)

ASSUME /\ NConv \in Nat \ {0} /\ NInputs \in Nat \ {0}
       /\ MaxBatch \in Nat \ {0} /\ MaxRounds \in Nat
       /\ MaxCrashes \in Nat /\ MaxAborts \in Nat
       /\ Bug \in {"none", "act_before_commit", "replay_unsafe"}

Conv == 1..NConv
Inputs == 1..NInputs
ConvOf(i) == ((i - 1) % NConv) + 1
\* Every run start takes a generation (at most one per input), every tool
\* round MaxBatch tool tasks and the generation it hands over to.
MaxTasks == NInputs + MaxRounds * (MaxBatch + 1)
TaskIds == 1..MaxTasks

-----------------------------------------------------------------------------
(* Vocabulary (core/model.py, core/lifecycle.py)                           *)

SubStatus == {"none", "queued", "placed", "done", "unanswered"}  \* "none": not admitted
Settled(st) == st \in {"done", "unanswered"}
Modes == {"follow_up", "steer"}                 \* when_busy of a queued input
Replay == {"safe", "unsafe"}                    \* a tool's replay promise
TaskStatus == {"pending", "running", "waiting", "terminal"}
Phases == {"prepare", "request", "tools",       \* pi.generation
           "call", "execute"}                   \* pi.tool
Outcomes == {"none", "completed", "failed", "aborted"}
NoTask == 0
Idle == [task |-> NoTask, inputs |-> {}]        \* pi.live.run of an idle conversation

Task == [kind: {"gen", "tool"}, conv: Conv, owner: {NoTask} \cup TaskIds,
         status: TaskStatus, phase: Phases, on: SUBSET TaskIds,
         tool: Tools \cup {"none"}, replay: Replay \cup {"none"},
         marked: BOOLEAN, outcome: Outcomes, results: Nat]
         \* `replay`: stored with `execute` (the intent); `marked`: the abort
         \* mark; `results`: result entries in the transcript answering this
         \* call (a tool task is one call of its assistant entry).
Item == [in: Inputs, mode: Modes]               \* a pi.inbox item

\* The durable store: what a commit writes, the one thing a crash keeps.
\* `settles` and `placings` count the journal's settling and placing
\* writes per submission (the journal is in the store, same transaction).
Store == [sub: [Inputs -> SubStatus], inbox: [Conv -> Seq(Item)],
          entered: SUBSET Inputs,               \* inputs with a user entry
          run: [Conv -> [task: {NoTask} \cup TaskIds, inputs: SUBSET Inputs]],
          tasks: Seq(Task), rounds: Nat,
          settles: [Inputs -> Nat], placings: [Inputs -> Nat]]

\* Effects, executed front to back by the shell (core/effects.py).
Commit == [op |-> "commit", task |-> NoTask]
RunTool(k) == [op |-> "run_tool", task |-> k]
CallModel(k) == [op |-> "call_model", task |-> k]
Cancel(k) == [op |-> "cancel", task |-> k]

-----------------------------------------------------------------------------
VARIABLES
    \* durable
    store,      \* the store (a Store)
    \* the process: dropped by a crash
    up,         \* the process is alive
    mem,        \* the core's state after its last step (ahead of `store` by a pending commit)
    outbox,     \* the effects of the last step not yet executed
    inflight,   \* tasks with a model call or tool body out in the shell
    catalog,    \* this life's tool declarations: [Tools -> Replay]
    \* the world and the host (outside the process, never dropped)
    bodyRuns,   \* tool task -> how often its body started, across lives
    crashes,    \* crashes so far
    aborts      \* host aborts so far

durable == <<store>>
process == <<up, mem, outbox, inflight, catalog>>
world == <<bodyRuns, crashes, aborts>>
vars == <<durable, process, world>>

-----------------------------------------------------------------------------
(* Store helpers: each returns a new store value (a draft, core/draft.py)  *)

Min(X) == CHOOSE x \in X : \A y \in X : x <= y
RECURSIVE SeqOf(_)
SeqOf(X) == IF X = {} THEN <<>> ELSE <<Min(X)>> \o SeqOf(X \ {Min(X)})

T(s, k) == s.tasks[k]
Ids(s) == 1..Len(s.tasks)
Live(s, k) == T(s, k).status /= "terminal"
Owned(s, k) == {j \in Ids(s) : T(s, j).owner = k}

NewGen(c) == [kind |-> "gen", conv |-> c, owner |-> NoTask, status |-> "pending",
              phase |-> "prepare", on |-> {}, tool |-> "none", replay |-> "none",
              marked |-> FALSE, outcome |-> "none", results |-> 0]
NewTool(c, g, t) == [NewGen(c) EXCEPT !.kind = "tool", !.owner = g, !.phase = "call", !.tool = t]

\* Task k ends with `outcome`; a tool's result entry is written with it.
Finish(s, k, outcome) ==
    [s EXCEPT !.tasks[k].status = "terminal", !.tasks[k].outcome = outcome,
              !.tasks[k].results = IF T(s, k).kind = "tool" THEN @ + 1 ELSE @]

\* Settle the inputs I that are not settled yet (first settlement wins).
SettleInputs(s, I, st) ==
    LET todo == {i \in I : ~Settled(s.sub[i])}
    IN [s EXCEPT !.sub = [i \in Inputs |-> IF i \in todo THEN st ELSE @[i]],
                 !.settles = [i \in Inputs |-> IF i \in todo THEN @[i] + 1 ELSE @[i]]]

\* core/runs.py end_run: only the run's responsible generation ends it.
EndRun(s, g, st) ==
    LET c == T(s, g).conv
    IN IF s.run[c].task /= g THEN s
       ELSE [SettleInputs(s, s.run[c].inputs, st) EXCEPT !.run[c] = Idle]

\* core/inbox.py boundary: the first steer item, and at a final boundary
\* also the first follow-up item.
First(q, m) == LET at == {n \in 1..Len(q) : q[n].mode = m}
               IN IF at = {} THEN {} ELSE {q[Min(at)].in}
Chosen(s, c, final) == First(s.inbox[c], "steer") \cup
                       (IF final THEN First(s.inbox[c], "follow_up") ELSE {})
\* Placing appends the user entry and moves the submission in the commit
\* that removes the item.
Place(s, c, I) ==
    [s EXCEPT !.inbox[c] = SelectSeq(@, LAMBDA x : x.in \notin I),
              !.sub = [i \in Inputs |-> IF i \in I THEN "placed" ELSE @[i]],
              !.placings = [i \in Inputs |-> IF i \in I THEN @[i] + 1 ELSE @[i]],
              !.entered = @ \cup I]
\* core/runs.py start_run: a new generation takes the run.
StartRun(s, c, I) ==
    IF I = {} THEN s
    ELSE [s EXCEPT !.tasks = Append(@, NewGen(c)),
                   !.run[c] = [task |-> Len(s.tasks) + 1, inputs |-> I]]
\* A final boundary: place what it selects; the placed inputs start a run.
FinalBoundary(s, c) == LET I == Chosen(s, c, TRUE) IN StartRun(Place(s, c, I), c, I)

-----------------------------------------------------------------------------
(* The two known-bad variants                                              *)

\* The commit-before-effect rule: the intent `execute` is durable before
\* the body starts. "act_before_commit" starts the body first.
ToolActs(k) == IF Bug = "act_before_commit" THEN <<RunTool(k), Commit>>
                                           ELSE <<Commit, RunTool(k)>>

\* core/tools.py replay_allows_rerun: the stored replay AND this life's
\* declaration are safe (a current `safe` never upgrades a stored
\* `unsafe`). "replay_unsafe" reads only the current declaration.
ReplayAllows(k) ==
    IF Bug = "replay_unsafe" THEN catalog[T(mem, k).tool] = "safe"
    ELSE T(mem, k).replay = "safe" /\ catalog[T(mem, k).tool] = "safe"

-----------------------------------------------------------------------------
(* The process: one action per core step                                   *)

\* The reducer takes the next event only once the last step's effects are
\* out (its commit is durable before any act starts).
Ready == up /\ outbox = <<>>

\* One step: the core's new state and the effects it returns.
Step(s, effects) == mem' = s /\ outbox' = effects

\* Rows of the phase tables run for a task that is not abort-marked and has
\* no invocation out (core/scheduling.py: a running task is never reserved
\* again).
Free(k) == ~T(mem, k).marked /\ k \notin inflight

(* -- admission (core/admission.py) -- *)

\* InputSubmitted: queued behind the current run, or - on an idle
\* conversation - queued then placed at once by a final boundary (an empty
\* inbox: the input itself starts a run). One commit. Inputs are
\* interchangeable, so they are admitted in id order.
Submit(i, m) ==
    /\ Ready /\ mem.sub[i] = "none" /\ \A j \in 1..(i - 1) : mem.sub[j] /= "none"
    /\ LET c == ConvOf(i)
           queued == [mem EXCEPT !.sub[i] = "queued", !.inbox[c] = Append(@, [in |-> i, mode |-> m])]
       IN Step(IF mem.run[c].task = NoTask THEN FinalBoundary(queued, c) ELSE queued, <<Commit>>)
    /\ UNCHANGED <<store, up, inflight, catalog, world>>

(* -- cancellation (core/cancellation.py) -- *)

\* ConversationAbortRequested: mark every live task of the conversation and
\* withdraw its queued inputs, one commit; a running task goes back to
\* pending and its invocation is cancelled after the commit.
Abort(c) ==
    /\ Ready /\ aborts < MaxAborts
    /\ LET M == {k \in Ids(mem) : T(mem, k).conv = c /\ Live(mem, k) /\ ~T(mem, k).marked}
           W == {mem.inbox[c][n].in : n \in 1..Len(mem.inbox[c])}
           marked == [mem EXCEPT !.tasks = [k \in Ids(mem) |->
                        IF k \in M THEN [@[k] EXCEPT !.marked = TRUE,
                                                     !.status = IF @ = "running" THEN "pending" ELSE @]
                        ELSE @[k]],
                      !.inbox[c] = <<>>]
           cancels == SeqOf(M \cap inflight)
       IN /\ M \cup W /= {}
          /\ Step(SettleInputs(marked, W, "unanswered"),
                  <<Commit>> \o [n \in 1..Len(cancels) |-> Cancel(cancels[n])])
    /\ aborts' = aborts + 1
    /\ UNCHANGED <<store, up, inflight, catalog, bodyRuns, crashes>>

\* The abort handler of a marked task whose owned work is gone (bottom-up):
\* a tool answers "Tool X was aborted"; a generation settles its run's
\* inputs unanswered/aborted. The inbox is left alone.
SettleAborted(k) ==
    /\ Ready /\ k \in Ids(mem) /\ T(mem, k).marked /\ Live(mem, k) /\ k \notin inflight
    /\ \A j \in Owned(mem, k) : ~Live(mem, j)
    /\ Step(Finish(EndRun(mem, k, "unanswered"), k, "aborted"), <<Commit>>)
    /\ UNCHANGED <<store, up, inflight, catalog, world>>

(* -- generation (core/generation.py, core/yields.py, core/rounds.py) -- *)

\* prepare | reserve -> request: the request is pinned, then sent.
RequestModel(g) ==
    /\ Ready /\ g \in Ids(mem) /\ T(mem, g).kind = "gen" /\ Free(g)
    /\ T(mem, g).status = "pending" /\ T(mem, g).phase = "prepare"
    /\ Step([mem EXCEPT !.tasks[g].status = "running", !.tasks[g].phase = "request"],
            <<Commit, CallModel(g)>>)
    /\ UNCHANGED <<store, up, inflight, catalog, world>>

\* request | reserve (recovery): send the pinned request again, no commit.
ResendRequest(g) ==
    /\ Ready /\ g \in Ids(mem) /\ T(mem, g).kind = "gen" /\ Free(g)
    /\ T(mem, g).status = "pending" /\ T(mem, g).phase = "request"
    /\ Step(mem, <<CallModel(g)>>)
    /\ UNCHANGED <<store, up, inflight, catalog, world>>

Asked(g) == /\ Ready /\ g \in inflight /\ T(mem, g).kind = "gen"
            /\ T(mem, g).phase = "request" /\ ~T(mem, g).marked

\* request | ModelResponded without calls -> terminal: the inputs are done,
\* the run ends, the final boundary may start the next run. One commit.
ModelAnswers(g) ==
    /\ Asked(g)
    /\ Step(FinalBoundary(EndRun(Finish(mem, g, "completed"), g, "done"), T(mem, g).conv), <<Commit>>)
    /\ inflight' = inflight \ {g}
    /\ UNCHANGED <<store, up, catalog, world>>

\* request | ModelFailed -> terminal: inputs unanswered, the inbox is left
\* alone (docs/queues.md: queued items wait for the next submission).
ModelFails(g) ==
    /\ Asked(g)
    /\ Step(Finish(EndRun(mem, g, "unanswered"), g, "failed"), <<Commit>>)
    /\ inflight' = inflight \ {g}
    /\ UNCHANGED <<store, up, catalog, world>>

\* request | ModelResponded with calls -> tools: the assistant entry and one
\* tool task per call in one commit, the generation waiting on them.
ModelCallsTools(g) ==
    /\ Asked(g) /\ mem.rounds < MaxRounds
    /\ \E n \in 1..MaxBatch, names \in [1..MaxBatch -> Tools] :
         LET base == Len(mem.tasks)
             new == base + 1..base + n
             c == T(mem, g).conv
         IN Step([mem EXCEPT !.tasks = [k \in 1..base + n |->
                                          IF k = g THEN [@[g] EXCEPT !.status = "waiting", !.phase = "tools", !.on = new]
                                          ELSE IF k <= base THEN @[k]
                                          ELSE NewTool(c, g, names[k - base])],
                             !.rounds = @ + 1],
                 <<Commit>>)
    /\ inflight' = inflight \ {g}
    /\ UNCHANGED <<store, up, catalog, world>>

\* tools | reserve, every tool task terminal -> terminal: hand the run over
\* to a new generation; the post-tools boundary places the first steer,
\* which joins the run. One commit.
HandOver(g) ==
    /\ Ready /\ g \in Ids(mem) /\ T(mem, g).kind = "gen" /\ Free(g)
    /\ T(mem, g).status = "waiting" /\ T(mem, g).phase = "tools"
    /\ \A k \in T(mem, g).on : ~Live(mem, k)
    /\ LET c == T(mem, g).conv
           I == Chosen(mem, c, FALSE)
           done == Place(Finish(mem, g, "completed"), c, I)
       IN Step([done EXCEPT !.tasks = Append(@, NewGen(c)),
                            !.run[c] = [task |-> Len(mem.tasks) + 1, inputs |-> @.inputs \cup I]],
               <<Commit>>)
    /\ UNCHANGED <<store, up, inflight, catalog, world>>

(* -- tools (core/tools.py) -- *)

\* call | reserve, ToolPrepared -> execute: the intent (final arguments and
\* this life's replay promise) is committed, then the body runs.
StartTool(k) ==
    /\ Ready /\ k \in Ids(mem) /\ T(mem, k).kind = "tool" /\ Free(k)
    /\ T(mem, k).status = "pending" /\ T(mem, k).phase = "call"
    /\ Step([mem EXCEPT !.tasks[k].status = "running", !.tasks[k].phase = "execute",
                        !.tasks[k].replay = catalog[T(mem, k).tool]],
            ToolActs(k))
    /\ UNCHANGED <<store, up, inflight, catalog, world>>

\* execute | reserve (recovery): re-run (no commit) when the replay allows
\* it, else settle the "interrupted, may have partially run" result.
ResumeTool(k) ==
    /\ Ready /\ k \in Ids(mem) /\ T(mem, k).kind = "tool" /\ Free(k)
    /\ T(mem, k).status = "pending" /\ T(mem, k).phase = "execute"
    /\ IF ReplayAllows(k) THEN Step(mem, <<RunTool(k)>>)
                          ELSE Step(Finish(mem, k, "failed"), <<Commit>>)
    /\ UNCHANGED <<store, up, inflight, catalog, world>>

\* execute | ToolFinished -> terminal: the result entry, one commit.
ToolFinishes(k) ==
    /\ Ready /\ k \in inflight /\ T(mem, k).kind = "tool" /\ ~T(mem, k).marked
    /\ Step(Finish(mem, k, "completed"), <<Commit>>)
    /\ inflight' = inflight \ {k}
    /\ UNCHANGED <<store, up, catalog, world>>

(* -- the shell (shell/loop.py) -- *)

\* Execute the next effect. A commit makes the core's state durable; an
\* act starts an invocation (a tool body counts as run once it starts).
Execute ==
    /\ up /\ outbox /= <<>>
    /\ LET e == Head(outbox) IN
         CASE e.op = "commit" ->
                store' = mem /\ UNCHANGED <<inflight, bodyRuns>>
           [] e.op = "run_tool" ->
                /\ inflight' = inflight \cup {e.task}
                /\ bodyRuns' = [bodyRuns EXCEPT ![e.task] = @ + 1]
                /\ UNCHANGED store
           [] e.op = "call_model" ->
                inflight' = inflight \cup {e.task} /\ UNCHANGED <<store, bodyRuns>>
           [] e.op = "cancel" ->
                inflight' = inflight \ {e.task} /\ UNCHANGED <<store, bodyRuns>>
    /\ outbox' = Tail(outbox)
    /\ UNCHANGED <<up, mem, catalog, crashes, aborts>>

\* The process dies at an effect boundary: only the store survives.
Crash ==
    /\ up /\ crashes < MaxCrashes
    /\ up' = FALSE /\ mem' = store /\ outbox' = <<>> /\ inflight' = {}
    /\ crashes' = crashes + 1
    /\ UNCHANGED <<store, catalog, bodyRuns, aborts>>

\* Opened (core/scheduling.py): running tasks go back to pending with their
\* checkpoints unchanged, one commit; the new life may declare its tools
\* differently.
Reopen(s) == [s EXCEPT !.tasks = [k \in Ids(s) |->
                 IF @[k].status = "running" THEN [@[k] EXCEPT !.status = "pending"] ELSE @[k]]]
Recover ==
    /\ ~up
    /\ up' = TRUE /\ store' = Reopen(store) /\ mem' = Reopen(store) /\ outbox' = <<>>
    /\ catalog' \in [Tools -> Replay]
    /\ UNCHANGED <<inflight, world>>

-----------------------------------------------------------------------------
Init ==
    /\ store = [sub |-> [i \in Inputs |-> "none"], inbox |-> [c \in Conv |-> <<>>],
                entered |-> {}, run |-> [c \in Conv |-> Idle], tasks |-> <<>>,
                rounds |-> 0, settles |-> [i \in Inputs |-> 0],
                placings |-> [i \in Inputs |-> 0]]
    /\ mem = store
    /\ up = TRUE /\ outbox = <<>> /\ inflight = {}
    /\ catalog \in [Tools -> Replay]
    /\ bodyRuns = [k \in TaskIds |-> 0] /\ crashes = 0 /\ aborts = 0

\* What the host does: never forced.
Host == \/ \E i \in Inputs, m \in Modes : Submit(i, m)
        \/ \E c \in Conv : Abort(c)

\* What the process, the model and the tools do: forced (weak fairness)
\* whenever something is enabled.
Work == \/ Execute \/ Recover
        \/ \E k \in TaskIds : \/ RequestModel(k) \/ ResendRequest(k)
                              \/ ModelAnswers(k) \/ ModelFails(k) \/ ModelCallsTools(k)
                              \/ HandOver(k) \/ StartTool(k) \/ ResumeTool(k)
                              \/ ToolFinishes(k) \/ SettleAborted(k)

Next == Host \/ Work \/ Crash

Spec == Init /\ [][Next]_vars /\ WF_vars(Work)

-----------------------------------------------------------------------------
(* Invariants: the names of specs/*.md and tests/invariants.py             *)

TypeOK ==
    /\ store \in Store /\ mem \in Store
    /\ up \in BOOLEAN /\ inflight \subseteq TaskIds
    /\ catalog \in [Tools -> Replay]
    /\ bodyRuns \in [TaskIds -> Nat] /\ crashes \in 0..MaxCrashes /\ aborts \in 0..MaxAborts

S == store     \* the invariants below read what is durable (as the crash suite reads the store)
Tools_(s) == {k \in Ids(s) : T(s, k).kind = "tool"}
Gens(s) == {k \in Ids(s) : T(s, k).kind = "gen"}

\* specs/lifecycle.md, storage.md: a submission is settled by exactly one write.
SubmissionsSettleOnce ==
    \A i \in Inputs : S.settles[i] = IF Settled(S.sub[i]) THEN 1 ELSE 0

\* specs/lifecycle.md, scheduling.md: a terminal task is never run: no
\* invocation is out, and no act is waiting, for a task the store holds
\* terminal (nor one the core holds terminal).
TerminalNeverRuns ==
    /\ \A k \in inflight : ~(k \in Ids(S) /\ ~Live(S, k)) /\ Live(mem, k)
    /\ \A n \in 1..Len(outbox) : outbox[n].op \in {"run_tool", "call_model"} =>
         ~(outbox[n].task \in Ids(S) /\ ~Live(S, outbox[n].task))
\* ... and never changed (an action property).
TerminalNeverRunsStep ==
    [][\A k \in Ids(store) : ~Live(store, k) => store'.tasks[k] = store.tasks[k]]_vars

\* specs/tools.md: an unsafe tool body runs at most once across all lives.
UnsafeToolRunsAtMostOnce ==
    \A k \in Tools_(S) : T(S, k).replay = "unsafe" => bodyRuns[k] <= 1

\* specs/tools.md, context.md: every call has exactly one result entry once
\* its task is terminal, none before.
OneResultPerCall ==
    \A k \in Tools_(S) : T(S, k).results = IF Live(S, k) THEN 0 ELSE 1

\* specs/cancellation.md, scheduling.md: once every admitted submission is
\* settled, nothing is live: no task, no run, no queued input.
NothingLiveAfterSettlement ==
    (\A i \in Inputs : S.sub[i] /= "none" => Settled(S.sub[i])) =>
        /\ \A k \in Ids(S) : ~Live(S, k)
        /\ \A c \in Conv : S.run[c] = Idle /\ S.inbox[c] = <<>>

\* specs/tools.md: a tool body runs only while its `execute` intent is stored.
IntentBeforeEffect ==
    \A k \in inflight : T(mem, k).kind = "tool" =>
        k \in Ids(S) /\ T(S, k).phase = "execute"

\* specs/generation.md, providers.md: a request is out only while its
\* `request` checkpoint is stored.
IntentBeforeRequest ==
    \A k \in inflight : T(mem, k).kind = "gen" =>
        k \in Ids(S) /\ T(S, k).phase = "request"

\* specs/admission.md: what admission promises is stored with the submission.
AdmissionIsAtomic ==
    \A i \in Inputs :
        /\ S.sub[i] = "placed" => i \in S.entered /\ i \in S.run[ConvOf(i)].inputs
        /\ S.sub[i] = "queued" => \E n \in 1..Len(S.inbox[ConvOf(i)]) : S.inbox[ConvOf(i)][n].in = i

\* specs/admission.md: an item is in the inbox exactly while its
\* submission is queued (it leaves only when placed or withdrawn).
QueuedInputNeverLost ==
    \A c \in Conv, i \in Inputs :
        (\E n \in 1..Len(S.inbox[c]) : S.inbox[c][n].in = i) <=> (S.sub[i] = "queued" /\ ConvOf(i) = c)

\* specs/admission.md: a submission is written `placed` at most once.
QueuedInputPlacedAtMostOnce ==
    \A i \in Inputs : S.placings[i] <= 1 /\ (i \in S.entered <=> S.placings[i] = 1)

\* specs/cancellation.md: a withdrawn input never gets a user entry.
WithdrawnInputNeverPlaced ==
    \A i \in Inputs : (S.sub[i] = "unanswered" /\ S.placings[i] = 0) => i \notin S.entered

\* specs/cancellation.md: settlement is bottom-up.
OwnerEndsAfterOwned ==
    \A k \in Ids(S) : ~Live(S, k) => \A j \in Owned(S, k) : ~Live(S, j)

\* specs/generation.md: a run names one live generation of its conversation.
RunHasOneOwner ==
    \A c \in Conv : S.run[c].task /= NoTask =>
        LET g == S.run[c].task
        IN g \in Gens(S) /\ T(S, g).conv = c /\ Live(S, g)
           /\ \A h \in Gens(S) \ {g} : T(S, h).conv = c => ~Live(S, h)

\* specs/generation.md: the tool tasks are stored with the generation
\* waiting on them (one commit), which waits until each is terminal.
RoundIsAtomic ==
    \A k \in Tools_(S) : LET g == T(S, k).owner IN
        /\ g \in Gens(S) /\ T(S, g).conv = T(S, k).conv
        /\ Live(S, g) => T(S, g).phase = "tools" /\ k \in T(S, g).on

\* specs/lifecycle.md: an outcome exactly when terminal (nothing is held
\* `completing` in this model).
OutcomeIffTerminal ==
    \A k \in Ids(S) : (T(S, k).outcome /= "none") <=> ~Live(S, k)

\* specs/scheduling.md: the open keeps every checkpoint (an action property).
RecoveryKeepsCheckpoints ==
    [][~up => \A k \in Ids(store) : store'.tasks[k].phase = store.tasks[k].phase
                                    /\ store'.tasks[k].replay = store.tasks[k].replay]_vars

-----------------------------------------------------------------------------
(* Liveness, under weak fairness of Work                                   *)

\* An admitted input is waiting for the protocol: not settled, and not
\* Stranded - queued when its run failed or was aborted, it waits in an
\* idle conversation for the host's next submission, whose admission
\* places it (docs/queues.md; the reference does the same).
Stranded(i) == store.sub[i] = "queued" /\ store.run[ConvOf(i)] = Idle
Waiting(i) == store.sub[i] \in {"queued", "placed"} /\ ~Stranded(i)

\* Every admitted input settles: whenever one waits, a state comes where
\* none does. (One formula rather than one per input: TLC checks each
\* conjunct of a liveness property as its own branch, each as costly as
\* the whole search.)
EveryInputSettles == (\E i \in Inputs : Waiting(i)) ~> (\A i \in Inputs : ~Waiting(i))

\* An abort drains: whenever a marked task is live, a state comes where
\* every marked task is terminal.
MarkedLive(k) == T(store, k).marked /\ Live(store, k)
AbortDrains == (\E k \in Ids(store) : MarkedLive(k)) ~> (\A k \in Ids(store) : ~MarkedLive(k))

=============================================================================
