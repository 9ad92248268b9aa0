"""The write path's plain encoding (issue 11 item 2) gives the reference
encoding's bytes: ``base.encode_write`` (records unstructured once with
``codec.plain``, row and journal texts spliced) against ``base.encode_write_reference``
(``codec.stored`` + ``codec.dumps``, then cut), and ``codec.events_json``
against ``codec.reference_events_json``, over records and events generated
from their declared types with strict JSON payloads (finite floats, strings
without lone surrogates: what the edge lets in). A value that is not plain
JSON data takes the reference way and gives its text or its error."""

from __future__ import annotations

import enum
import math
import types
from collections.abc import Mapping
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints

import attrs
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from pidurable.core.effects import DocumentRevision, PutDocument, PutEntry, PutTask, RevisionAction
from pidurable.core.events import EVENT_TYPES, ModelResponded, PreparedCall, TaskCommitRequested, ToolFinished
from pidurable.core.model import Entry, Outcome, OutcomeStatus, Task, TaskStatus, ToolCall, Usage
from pidurable.core.state import DocHistory, DocScope, ForkPolicy
from pidurable.shell.storage import base, codec, rows, spelt

# --- strategies from declared types ----------------------------------------------

JSON_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=12),  # Hypothesis' text has no lone surrogates
)
JSON = st.recursive(
    JSON_SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.lists(inner, max_size=3).map(tuple),  # the core's ops are tuples: JSON arrays all the same
        st.dictionaries(st.text(max_size=8), inner, max_size=4),
    ),
    max_leaves=12,
)
JSON_OBJECT = st.dictionaries(st.text(max_size=8), JSON, max_size=5)


def of_type(t: Any, depth: int = 0) -> st.SearchStrategy[Any]:
    """Values of declared type ``t`` (attrs classes field by field)."""
    if t is Any:
        return JSON
    if hasattr(t, "__supertype__"):
        return of_type(t.__supertype__, depth)
    if t is type(None):
        return st.none()
    if t is bool:
        return st.booleans()
    if t is int:
        return st.integers(min_value=-(2**40), max_value=2**40)
    if t is float:
        return st.floats(allow_nan=False, allow_infinity=False)
    if t is str:
        return st.text(max_size=10)
    if isinstance(t, type) and issubclass(t, enum.Enum):
        return st.sampled_from(list(t))
    if isinstance(t, type) and attrs.has(t):
        return records(t, depth + 1)
    origin, args = get_origin(t), get_args(t)
    if origin is Literal:
        return st.sampled_from(args)
    if origin in (Union, types.UnionType):
        return st.one_of([of_type(a, depth) for a in args])
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return st.lists(of_type(args[0], depth), max_size=0 if depth > 2 else 3).map(tuple)
        return st.tuples(*(of_type(a, depth) for a in args))
    if origin is list:
        return st.lists(of_type(args[0], depth), max_size=3)
    if origin in (dict, Mapping):
        if args[0] is str and args[1] is Any:
            return JSON_OBJECT
        return st.dictionaries(of_type(args[0], depth), of_type(args[1], depth), max_size=0 if depth > 2 else 3)
    raise NotImplementedError(f"no strategy for {t!r}")


@st.composite
def _build(draw: st.DrawFn, cl: type, depth: int) -> Any:
    hints = get_type_hints(cl)
    kwargs = {}
    for f in attrs.fields(cl):
        if not f.init:
            continue
        values = of_type(hints[f.name], depth)
        if f.default is not attrs.NOTHING:  # often the default: the encoders leave it out
            default = f.default.factory() if isinstance(f.default, attrs.Factory) else f.default  # type: ignore[misc]
            values = st.just(default) | values
        kwargs[f.alias or f.name] = draw(values)
    try:
        return cl(**kwargs)
    except (TypeError, ValueError):  # a class's own checks
        assume(False)


def records(cl: type, depth: int = 0) -> st.SearchStrategy[Any]:
    if depth > 4:
        return st.nothing()
    return _build(cl, depth)


SEQS = st.integers(min_value=1, max_value=2**40)
TASKS = records(Task) | st.builds(
    Task,  # a task as the core writes it every step: a checkpoint, an outcome when terminal
    id=st.integers(1, 10**9), conversation_id=st.integers(1, 10**6), kind=st.sampled_from(["pi.tool", "pi.generation", "host.job"]),
    input=JSON_OBJECT, owner=st.none() | st.integers(1, 10**9), status=st.sampled_from(list(TaskStatus)),
    checkpoint=JSON_OBJECT, on=st.lists(st.integers(1, 10**9), max_size=3).map(tuple),
    outcome=st.none() | records(Outcome), started_at=st.none() | st.integers(0, 2**45),
    ended_at=st.none() | st.integers(0, 2**45),
)
REVISIONS = records(DocumentRevision) | st.builds(
    DocumentRevision,
    scope=st.sampled_from(list(DocScope)), owner=st.integers(-(2**40), 2**40), kind=st.text(max_size=10),
    version=st.integers(0, 10), history=st.sampled_from(list(DocHistory)), fork=st.sampled_from(list(ForkPolicy)),
    action=st.sampled_from(list(RevisionAction)), value=JSON,
    ops=st.lists(st.lists(JSON, max_size=3), max_size=4).map(tuple),
)
WRITES = st.one_of(
    st.builds(PutEntry, entry=records(Entry)),
    st.builds(PutTask, task=TASKS),
    st.builds(PutDocument, document_id=st.integers(-(2**40), 2**40), revision=REVISIONS),
)


# --- the same bytes ---------------------------------------------------------------


@given(w=WRITES, seq=SEQS)
def test_a_write_encodes_to_the_reference_row_and_journal_text(w: Any, seq: int) -> None:
    assert base.encode_write(w, seq) == base.encode_write_reference(w, seq)


@given(events=st.lists(st.one_of([records(cl) for cl in EVENT_TYPES]), max_size=3))
def test_events_encode_to_the_reference_text(events: list[Any]) -> None:
    assert codec.events_json(events) == codec.reference_events_json(events)
    assert spelt.events_json(events) == codec.reference_events_json(events)


@st.composite
def _model_responded(draw: st.DrawFn) -> ModelResponded:
    """A model step's message with prepared calls, as the shell makes it (one
    per tool call, mostly with the call's own arguments), or not quite."""
    calls = draw(st.lists(st.builds(ToolCall, id=st.text(max_size=4), name=st.text(max_size=4), arguments=JSON_OBJECT), max_size=4))
    prepared = []
    for call in calls:
        args = draw(st.sampled_from(["same", "copy", "reversed", "other", "none"]))
        if args == "none":
            prepared.append(None)
            continue
        arguments = {
            "same": call.arguments,
            "copy": dict(call.arguments),
            "reversed": dict(reversed(list(call.arguments.items()))),  # equal, another text (two keys or more)
            "other": draw(JSON_OBJECT),
        }[args]
        prepared.append(PreparedCall(arguments=arguments, replay=draw(st.sampled_from(["safe", "unsafe"]))))
    if draw(st.booleans()):  # not one per call: written whole
        prepared = prepared[: draw(st.integers(0, len(prepared)))] + draw(st.lists(st.none(), max_size=1))
    return ModelResponded(
        now=draw(st.integers(0, 2**45)), task_id=draw(st.integers(1, 10**6)), attempt=draw(st.integers(1, 3)),
        text=draw(st.text(max_size=5)), tool_calls=tuple(calls), stop_reason=draw(st.sampled_from(["stop", "tool_use"])),
        prepared=tuple(prepared), continuation=draw(st.none() | st.text(max_size=3)),
    )


@given(events=st.lists(_model_responded(), min_size=1, max_size=2))
def test_a_model_step_with_prepared_calls_encodes_to_the_reference_text(events: list[Any]) -> None:
    """The spelt-out ModelResponded leaves a prepared call's arguments out
    exactly when the reference does (they encode like its tool call's)."""
    assert spelt.events_json(events) == codec.reference_events_json(events) == codec.events_json(events)


@given(writes=st.lists(WRITES, max_size=5), seq=SEQS)
def test_a_commit_encodes_as_its_writes_one_by_one_the_reference_way(writes: list[Any], seq: int) -> None:
    got, _, text = base.encode_commit_text(seq, writes, ())
    reference = [base.encode_write_reference(w, seq) for w in writes]
    assert got == [row for row, _ in reference]
    assert text == codec.journal_writes(piece for _, piece in reference)


def test_the_plain_way_is_taken_for_what_every_step_writes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Entries, live and terminal tasks and document revisions of plain data
    never fall back to the reference encoding (it would be correct, only slow)."""
    task = Task(id=7, conversation_id=1, kind="pi.tool", input={"name": "t"}, checkpoint={"phase": "execute", "arguments": {"i": 1}})
    done = attrs.evolve(task, status=TaskStatus.TERMINAL, outcome=Outcome(status="completed", result={"entry_id": 9}))
    revision = DocumentRevision(
        scope=DocScope.CONVERSATION, owner=1, kind="pi.live", version=1, history=DocHistory.LATEST,
        fork=ForkPolicy.INITIAL, action=RevisionAction.DELTA, ops=(["s", ["tools", 1, "status"], "done"],),
    )
    writes = [
        PutEntry(entry=Entry(id=9, conversation_id=1, kind="tool_result", text="ok", tool_call_id="c", tool_name="t")),
        PutTask(task=task),
        PutTask(task=done),
        PutTask(task=Task(id=8, conversation_id=1, kind="pi.generation")),  # nothing but its columns
        PutDocument(document_id=-10, revision=revision),
    ]
    expected = [base.encode_write_reference(w, 3) for w in writes]

    def refuse(w: Any, seq: int) -> Any:
        raise AssertionError(f"{type(w).__name__} took the reference way")

    monkeypatch.setattr(rows, "encode_write_reference", refuse)
    assert [base.encode_write(w, 3) for w in writes] == expected
    got, _, text = base.encode_commit_text(3, writes, ())
    assert (got, text) == ([row for row, _ in expected], codec.journal_writes(piece for _, piece in expected))


def test_the_spliced_fields_are_the_ones_the_reference_cuts() -> None:
    """The reference row text of an entry or a live task is its record
    without exactly the fields the plain way splices back in front."""
    entry = Entry(id=3, conversation_id=2, kind="user", text="hi")
    task = Task(id=5, conversation_id=2, kind="k", owner=1, status=TaskStatus.RUNNING, checkpoint={"phase": "p"})
    for w, record, leading in ((PutEntry(entry=entry), entry, rows._ENTRY_LEADING), (PutTask(task=task), task, rows._TASK_LEADING)):
        data = codec.stored.unstructure(record)
        assert list(data)[: len(leading)] == list(leading)
        row, _ = base.encode_write_reference(w, 1)
        assert row.columns["record"] == codec.dumps({k: v for k, v in data.items() if k not in leading})


# --- what is not plain JSON data: the reference text, or its error ------------------


@attrs.frozen
class _Point:
    x: int


class _Color(enum.Enum):  # neither a string nor an integer enum
    RED = "red"


NOT_PLAIN = [
    {"at": _Point(1)},  # an attrs object in a payload: the reference unstructures it
    {"color": _Color.RED},
    {_Color.RED: 1},  # a key JSON does not take as it is
    {"set": {1, 2}},  # fails both ways
    {"nan": math.nan},  # fails both ways
    {"inf": [math.inf]},
]


@pytest.mark.parametrize("payload", NOT_PLAIN, ids=repr)
@pytest.mark.parametrize("make", ["entry", "task", "terminal task", "revision", "event"])
def test_a_payload_that_is_not_plain_gives_the_reference_text_or_error(payload: dict[Any, Any], make: str) -> None:
    task = Task(id=5, conversation_id=2, kind="k", checkpoint=payload, status=TaskStatus.RUNNING)
    if make == "event":
        events = [TaskCommitRequested(now=1, ticket=1, task_id=5, status="running", checkpoint=payload)]
        run = lambda: codec.events_json(events)  # noqa: E731
        reference = lambda: codec.reference_events_json(events)  # noqa: E731
    else:
        w = {
            "entry": PutEntry(entry=Entry(id=3, conversation_id=2, kind="x", data=payload)),
            "task": PutTask(task=task),
            "terminal task": PutTask(task=attrs.evolve(task, status=TaskStatus.TERMINAL, input=payload)),
            "revision": PutDocument(document_id=4, revision=DocumentRevision(
                scope=DocScope.TASK, owner=5, kind="k", version=1, history=DocHistory.LATEST,
                fork=ForkPolicy.INITIAL, action=RevisionAction.BASE, value=payload,
            )),
        }[make]
        run = lambda: base.encode_write(w, 1)  # noqa: E731
        reference = lambda: base.encode_write_reference(w, 1)  # noqa: E731
    try:
        expected = reference()
    except Exception as e:  # noqa: BLE001 - whatever the reference raises, the fast way raises too
        with pytest.raises(type(e)):
            run()
    else:
        assert run() == expected


def test_a_bool_where_an_id_goes_takes_the_reference_way() -> None:
    """JSON writes ``true`` where ``str`` would write ``True``: such a record
    is encoded the reference way (which does not cut it)."""
    w = PutEntry(entry=Entry(id=True, conversation_id=2, kind="x"))  # type: ignore[arg-type]
    assert base.encode_write(w, 1) == base.encode_write_reference(w, 1)


# --- the pieces way (rows._fast_entry, rows._fast_task) and its fall-back to the dict way ---


def test_the_usual_entries_and_tasks_take_the_pieces_way(monkeypatch: pytest.MonkeyPatch) -> None:
    """What every step writes is joined from pieces, never built as a dict
    (that way would be correct, only slower)."""
    running = Task(id=7, conversation_id=1, kind="pi.tool", input={"name": "t"}, owner=3, status=TaskStatus.RUNNING,
                   checkpoint={"phase": "execute"}, on=(4, 5), started_at=10)  # fmt: skip
    writes = [
        PutEntry(entry=Entry(id=9, conversation_id=1, kind="tool_result", text="ok", tool_call_id="c", tool_name="t", by_task_id=7, at=11)),
        PutEntry(entry=Entry(id=10, conversation_id=1, kind="assistant", tool_calls=(ToolCall(id="c", name="t", arguments={"i": 1}),), stop_reason="tool_use", is_error=True)),
        PutTask(task=running),
        PutTask(task=attrs.evolve(running, status=TaskStatus.TERMINAL, outcome=Outcome(status=OutcomeStatus.FAILED, error={"m": "x"}), ended_at=12)),
        PutTask(task=Task(id=8, conversation_id=1, kind="pi.generation")),
    ]
    expected = [base.encode_write_reference(w, 3) for w in writes]

    def refuse(w: Any, seq: int) -> Any:
        raise AssertionError(f"{type(w).__name__} took the dict way")

    monkeypatch.setattr(rows, "_entry_by_dict", refuse)
    monkeypatch.setattr(rows, "_task_by_dict", refuse)
    assert [base.encode_write(w, 3) for w in writes] == expected


class _Kind(enum.StrEnum):
    JOB = "job"


ODD_TASKS = [  # a field of a type the pieces way does not spell, or a rare field set
    {"owner": True}, {"started_at": False}, {"ended_at": 2.5}, {"kind": _Kind.JOB}, {"status": "running"},
    {"input": [1]}, {"checkpoint": ()}, {"on": [1, 2]}, {"version": 2}, {"background": True}, {"abort_requested": 1},
    {"memos": {"a": 1}}, {"outcome": Outcome(status="completed")},  # type: ignore[arg-type]
]
ODD_ENTRIES = [
    {"by_task_id": True}, {"at": True}, {"is_error": 1}, {"text": None}, {"tool_name": 3}, {"stop_reason": _Kind.JOB},
    {"kind": _Kind.JOB}, {"tool_calls": []}, {"data": {"x": 1.5}},
]


@pytest.mark.parametrize("changes", ODD_TASKS, ids=repr)
@pytest.mark.parametrize("status", [TaskStatus.RUNNING, TaskStatus.TERMINAL])
def test_an_odd_task_gives_the_reference_text(changes: dict[str, Any], status: TaskStatus) -> None:
    task = Task(id=5, conversation_id=2, kind="k", status=status, input={"a": 1}, checkpoint={"phase": "p"}, owner=1)
    _same_or_same_error(PutTask(task=attrs.evolve(task, **changes)))


@pytest.mark.parametrize("changes", ODD_ENTRIES, ids=repr)
def test_an_odd_entry_gives_the_reference_text(changes: dict[str, Any]) -> None:
    _same_or_same_error(PutEntry(entry=attrs.evolve(Entry(id=3, conversation_id=2, kind="x", text="t", by_task_id=1, at=4), **changes)))


def _same_or_same_error(w: Any) -> None:
    try:
        expected = base.encode_write_reference(w, 1)
    except Exception as e:  # noqa: BLE001 - whatever the reference raises, the fast way raises too
        with pytest.raises(type(e)):
            base.encode_write(w, 1)
    else:
        assert base.encode_write(w, 1) == expected


@pytest.mark.parametrize("changes", [
    {}, {"text": ""}, {"text": "é\n\"q\""}, {"is_error": True}, {"control": {"terminate": True}}, {"truncated": {"n": 1}},
    {"text": None}, {"now": True}, {"task_id": 2.0},
], ids=repr)  # fmt: skip
def test_a_tool_finished_alone_encodes_to_the_reference_text(changes: dict[str, Any]) -> None:
    """A commit of one ToolFinished is joined from pieces when its fields are
    plain and at their defaults (else the general way): the same text."""
    events = [attrs.evolve(ToolFinished(now=5, task_id=7, text="ok"), **changes)]
    try:
        expected = codec.reference_events_json(events)
    except Exception as e:  # noqa: BLE001 - whatever the reference raises, the fast way raises too
        with pytest.raises(type(e)):
            spelt.events_json(events)
    else:
        assert spelt.events_json(events) == expected


# --- a model step: its ModelResponded joined from pieces, the tool calls' text shared with its entry ---


def _model_step() -> tuple[list[Any], list[Any]]:
    """An assistant entry and its ModelResponded, as the core makes them
    (the entry's tool calls: the event's ToolCall objects in a new tuple)."""
    calls = (ToolCall(id="c0", name="t", arguments={"i": 0}), ToolCall(id="c1", name="t", arguments={"i": 1, "s": "x"}))
    entry = Entry(id=9, conversation_id=1, kind="assistant", tool_calls=tuple(list(calls)), stop_reason="tool_use", by_task_id=4, at=3)
    prepared = (PreparedCall(arguments=calls[0].arguments, replay="safe"), PreparedCall(arguments={"i": 2}, replay="unsafe"))
    event = ModelResponded(now=3, task_id=4, attempt=1, tool_calls=calls, stop_reason="tool_use", prepared=prepared)
    return [PutEntry(entry=entry)], [event]


def test_a_model_step_encodes_its_tool_calls_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The ModelResponded of a commit takes its assistant entry's tool calls
    text (one encoding) and is joined from pieces (not the general way):
    the reference's rows and texts."""
    writes, events = _model_step()
    expected = ([base.encode_write_reference(w, 2)[0] for w in writes], codec.reference_events_json(events))
    made = []
    plain_tool_calls = spelt.plain_tool_calls
    monkeypatch.setattr(spelt, "plain_tool_calls", lambda calls: made.append(calls) or plain_tool_calls(calls))

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the general way")

    monkeypatch.setattr(codec, "events_json", refuse)
    got, events_text, _ = base.encode_commit_text(2, writes, events)
    assert (got, events_text) == expected
    assert len(made) == 1
    assert spelt.events_json(events) == expected[1]  # (not after its writes: encoded itself)
    assert len(made) == 2


def test_a_commit_never_takes_tool_calls_text_from_an_earlier_commit() -> None:
    """The shared text is the commit's own: calls changed after an earlier
    commit encoded them (the same objects) are encoded again."""
    writes, events = _model_step()
    base.encode_commit_text(2, writes, ())
    events[0].tool_calls[0].arguments["i"] = 5
    assert base.encode_commit_text(3, [], events)[1] == codec.reference_events_json(events)
    assert '"arguments":{"i":5}' in codec.reference_events_json(events)


@pytest.mark.parametrize("changes", [
    {}, {"text": "é\n"}, {"stop_reason": "stop"}, {"usage": Usage(input_tokens=3)}, {"continuation": "go on"},
    {"prepared": ()}, {"prepared": (None, PreparedCall(arguments={"i": 1}, replay="safe"))},
    {"prepared": (PreparedCall(arguments={"i": 0}, replay="safe"),)}, {"tool_calls": ()}, {"now": True},
    {"attempt": 1.0}, {"text": None}, {"stop_reason": 3}, {"continuation": 4}, {"tool_calls": [ToolCall(id="a", name="b")]},
    {"prepared": (PreparedCall(arguments={"i": 0}, replay=1), None)}, {"prepared": ({"replay": "safe"}, None)},
    {"prepared": (PreparedCall(arguments={"i": math.nan}, replay="safe"), None)},
    {"tool_calls": (ToolCall(id="a", name="b", arguments={"x": object()}),)},
], ids=repr)  # fmt: skip
def test_a_model_responded_alone_encodes_to_the_reference_text(changes: dict[str, Any]) -> None:
    """A commit of one ModelResponded is joined from pieces when its fields
    are of the usual types (else the general way): the same text or error."""
    writes, events = _model_step()
    events = [attrs.evolve(events[0], **changes)]
    try:
        expected = codec.reference_events_json(events)
    except Exception as e:  # noqa: BLE001 - whatever the reference raises, the fast way raises too
        with pytest.raises(type(e)):
            base.encode_commit_text(2, writes, events)
    else:
        assert base.encode_commit_text(2, writes, events)[1] == expected
        assert spelt.events_json(events) == expected


@pytest.mark.parametrize("kind", ["tool", "model"])
def test_an_entrys_text_is_encoded_once_for_its_event(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A tool result's text is its ToolFinished's, an answer's its
    ModelResponded's: the commit encodes it once (a text equal but not the
    same object is encoded again: the same bytes)."""
    text = "long output é\n" * 50
    entry = Entry(id=9, conversation_id=1, kind="tool_result", text=text, tool_call_id="c", tool_name="t", by_task_id=4, at=3)
    event: Any = ToolFinished(now=3, task_id=4, text=text)
    if kind == "model":
        writes, events = _model_step()
        entry, event = attrs.evolve(writes[0].entry, text=text), attrs.evolve(events[0], text=text)
    writes, events = [PutEntry(entry=entry)], [event]
    expected = ([base.encode_write_reference(w, 2)[0] for w in writes], codec.reference_events_json(events))
    encoded = []
    for module in (rows, spelt):
        encode = getattr(module, "_encode_str")
        monkeypatch.setattr(module, "_encode_str", lambda s, encode=encode: encoded.append(s) or encode(s))
    got, events_text, _ = base.encode_commit_text(2, writes, events)
    assert (got, events_text) == expected
    assert encoded.count(text) == 1
    copy = "".join(list(text))
    assert copy is not text
    events = [attrs.evolve(event, text=copy)]
    assert base.encode_commit_text(2, writes, events)[1] == expected[1]
    assert encoded.count(text) == 3
