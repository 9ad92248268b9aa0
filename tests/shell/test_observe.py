"""Logs and traces for hosts (issue 10, item 4): structured records on the
``pidurable`` logger and OpenTelemetry spans, derived from durable commits."""

from __future__ import annotations

import logging
import sys
from types import SimpleNamespace

import pytest
import trio
import trio.testing

from pidurable.core.builtins import builtin_address, builtin_id
from pidurable.core.effects import WRITE_TYPES, PutDocument, PutTask
from pidurable.core.model import OutcomeStatus, RetryPolicy
from pidurable.core.records import TWINS
from pidurable.core.state import LIVE_DOC, Live, RunInfo
from pidurable.shell import (
    AgentConfig,
    Harness,
    Input,
    InvalidInput,
    MemoryStorage,
    ModelRef,
    Registry,
    Settings,
    define_task,
    define_tool,
)
from pidurable.shell.observe import Observer, _may_warn, load_tracing
from pidurable.shell.providers import ScriptedModels, reply, tool_call

AGENT = AgentConfig(model=ModelRef("scripted", "m"))


def records(caplog: pytest.LogCaptureFixture, kind: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "pidurable" and getattr(r, "kind", None) == kind]


def one_tool() -> Registry:
    registry = Registry()

    async def run(call, args):  # type: ignore[no-untyped-def]
        await trio.sleep(1)
        return "ok"

    registry.install(define_tool("t", "a tool", {"type": "object"}, run, replay="safe"))
    return registry


async def test_a_retry_is_logged_with_its_delay(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """A retryable model error becomes a WARNING record ``kind=retry`` with the
    conversation, the task, the attempt, the error and the backoff delay."""
    caplog.set_level(logging.WARNING, logger="pidurable")
    settings = Settings(retry=RetryPolicy(base_delay_ms=2_000))
    models = ScriptedModels([reply(error="429 Too Many Requests", retryable=True), reply(text="finally")])
    async with Harness.open(MemoryStorage(), models=models, registry=Registry(), settings=settings) as h:
        conv = await h.root(agent=AGENT)
        sub = await conv.submit(Input("go"))
        with trio.fail_after(60):
            assert (await sub.wait()).status == "done"
    (record,) = records(caplog, "retry")
    assert record.levelno == logging.WARNING
    assert record.delay_ms == settings.retry.delay_ms(1, None) == 2_000  # type: ignore[attr-defined]
    assert record.attempt == 1  # type: ignore[attr-defined]
    assert record.conversation_id == conv.id  # type: ignore[attr-defined]
    assert record.task_kind == "pi.generation"  # type: ignore[attr-defined]
    assert "429" in record.error  # type: ignore[attr-defined]
    assert "retrying in 2000 ms" in record.getMessage()


async def test_lifecycle_records_at_info(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """A run with one tool call logs run_start, tool_start, tool_end and
    run_end at INFO (in that order) with structured ids; model requests at DEBUG."""
    caplog.set_level(logging.DEBUG, logger="pidurable")
    models = ScriptedModels([reply(tool_calls=[tool_call("t")]), reply(text="done")])
    async with Harness.open(MemoryStorage(), models=models, registry=one_tool()) as h:
        conv = await h.root(agent=AGENT)
        sub = await conv.submit(Input("go"))
        with trio.fail_after(60):
            await sub.wait()
            await conv.wait_idle()
    kinds = [getattr(r, "kind", None) for r in caplog.records if r.levelno == logging.INFO and hasattr(r, "kind")]
    assert kinds == ["run_start", "tool_start", "tool_end", "run_end"]
    (start,) = records(caplog, "tool_start")
    (end,) = records(caplog, "tool_end")
    assert (start.tool, start.task_id, start.conversation_id) == ("t", end.task_id, conv.id)  # type: ignore[attr-defined]
    assert (end.outcome, end.is_error) == ("completed", False)  # type: ignore[attr-defined]
    (run_end,) = records(caplog, "run_end")
    assert run_end.statuses == {sub.id: "done"}  # type: ignore[attr-defined]
    assert [r.attempt for r in records(caplog, "model_request")] == [1, 1]  # type: ignore[attr-defined]
    assert all(r.levelno == logging.DEBUG for r in records(caplog, "model_request"))


async def test_a_faulted_task_is_a_warning(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """A custom task whose phase raises ends ``faulted``: one WARNING ``fault``
    record with its error."""
    caplog.set_level(logging.WARNING, logger="pidurable")

    async def boom(task, runtime):  # type: ignore[no-untyped-def]
        raise RuntimeError("kaboom")

    registry = Registry()
    registry.install(define_task("demo.boom", initial=lambda input: {"phase": "start"}, phases={"start": boom}))
    async with Harness.open(MemoryStorage(), models=None, registry=registry) as h:
        await h.root(agent=AGENT)
        task_id = await h.create_task("demo.boom")
        with trio.fail_after(60):
            await h.wait_for_task(task_id)
    faults = records(caplog, "fault")
    assert [(r.task_id, r.outcome) for r in faults] == [(task_id, "faulted")]  # type: ignore[attr-defined]
    assert "kaboom" in faults[0].error  # type: ignore[attr-defined]


async def retry_then_answer(observer: Observer) -> None:
    """One submission whose model call fails once (retryable) and then
    answers, with ``observer`` watching the harness."""
    models = ScriptedModels([reply(error="busy", retryable=True), reply(text="ok")])
    async with Harness.open(MemoryStorage(), models=models, registry=Registry(),
                            settings=Settings(retry=RetryPolicy(base_delay_ms=10))) as h:
        h.runtime.observer = observer
        conv = await h.root(agent=AGENT)
        with trio.fail_after(60):
            assert (await (await conv.submit(Input("go"))).wait()).status == "done"


async def test_nothing_is_formatted_when_logging_is_off(autojump_clock: trio.testing.MockClock) -> None:
    """With the logger disabled and no tracing the observer returns at once."""
    logger = logging.getLogger("pidurable")
    old = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        await retry_then_answer(Observer(tracing=False))
    finally:
        logger.setLevel(old)


def test_without_opentelemetry_nothing_is_imported(monkeypatch: pytest.MonkeyPatch) -> None:
    """When ``opentelemetry`` cannot be imported, tracing is off (no error)."""
    monkeypatch.setitem(sys.modules, "opentelemetry", None)
    monkeypatch.setitem(sys.modules, "opentelemetry.trace", None)
    assert load_tracing() is None
    assert Observer().otel is None


async def test_a_tracer_that_is_not_one_is_refused() -> None:
    """``Harness.open(tracer=...)`` takes an OpenTelemetry tracer only."""
    pytest.importorskip("opentelemetry.trace")
    with pytest.raises(InvalidInput):
        async with Harness.open(MemoryStorage(), models=None, registry=Registry(), tracer=object()):
            pass


async def test_spans_for_the_run_its_model_requests_and_tools(autojump_clock: trio.testing.MockClock) -> None:
    """With an OpenTelemetry SDK tracer: one run span, a model-request span per
    attempt and a tool span, the latter two children of the run span, each
    with the conversation and task ids; a retried request's span has an
    ERROR status."""
    pytest.importorskip("opentelemetry.sdk")
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.trace import StatusCode

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    models = ScriptedModels(
        [reply(error="overloaded", retryable=True), reply(tool_calls=[tool_call("t")]), reply(text="done")]
    )
    settings = Settings(retry=RetryPolicy(base_delay_ms=10))
    async with Harness.open(
        MemoryStorage(), models=models, registry=one_tool(), settings=settings, tracer=provider.get_tracer("test")
    ) as h:
        conv = await h.root(agent=AGENT)
        sub = await conv.submit(Input("go"))
        with trio.fail_after(60):
            await sub.wait()
            await conv.wait_idle()
    spans = exporter.get_finished_spans()
    names = sorted(s.name for s in spans)
    assert names == ["pidurable.model_request"] * 3 + ["pidurable.run", "pidurable.tool t"]
    (run,) = [s for s in spans if s.name == "pidurable.run"]
    assert run.attributes["pidurable.conversation_id"] == conv.id
    assert run.attributes["pidurable.outcome"] == "done"
    for s in spans:
        if s is not run:
            assert s.parent is not None and s.parent.span_id == run.context.span_id
            assert s.attributes["pidurable.conversation_id"] == conv.id
            assert isinstance(s.attributes["pidurable.task_id"], int)
    requests = sorted((s for s in spans if s.name == "pidurable.model_request"), key=lambda s: s.start_time)
    assert [s.attributes["pidurable.attempt"] for s in requests] == [1, 2, 1]
    assert requests[0].status.status_code is StatusCode.ERROR and requests[0].status.description == "overloaded"
    assert requests[1].status.status_code is StatusCode.UNSET
    (tool,) = [s for s in spans if s.name == "pidurable.tool t"]
    assert tool.attributes["pidurable.outcome"] == "completed"


async def test_open_spans_end_when_the_harness_closes(autojump_clock: trio.testing.MockClock) -> None:
    """Spans of work still running at close end, marked ``pidurable.closed``."""
    pytest.importorskip("opentelemetry.sdk")
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    models = ScriptedModels([reply(text="slow", delay=100)])
    async with Harness.open(MemoryStorage(), models=models, registry=Registry(), tracer=provider.get_tracer("t")) as h:
        conv = await h.root(agent=AGENT)
        await conv.submit(Input("go"))
        await trio.sleep(1)
    spans = exporter.get_finished_spans()
    assert sorted(s.name for s in spans) == ["pidurable.model_request", "pidurable.run"]
    assert all(s.attributes["pidurable.closed"] is True for s in spans)


async def test_a_global_provider_set_while_the_harness_is_open_is_used(
    autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a tracer given, spans go to the global provider from the
    flush after a host sets one (the observer reads OpenTelemetry's set-once
    global per flush, not the environment: issue 11 item 2)."""
    pytest.importorskip("opentelemetry.sdk")
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    models = ScriptedModels([reply(text="before"), reply(text="after")])
    async with Harness.open(MemoryStorage(), models=models, registry=Registry()) as h:
        conv = await h.root(agent=AGENT)
        with trio.fail_after(60):
            await (await conv.submit(Input("one"))).wait()
            await conv.wait_idle()
        assert exporter.get_finished_spans() == ()
        # what set_tracer_provider does (set-once per process: patched, so
        # that the rest of the suite runs without it)
        monkeypatch.setattr(trace, "_TRACER_PROVIDER", provider)
        with trio.fail_after(60):
            await (await conv.submit(Input("two"))).wait()
            await conv.wait_idle()
    assert sorted(s.name for s in exporter.get_finished_spans()) == ["pidurable.model_request", "pidurable.run"]


async def test_compaction_start_and_end_are_logged(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """``conv.compact()`` logs compaction_start (with its reason) and
    compaction_end (with its outcome) at INFO, naming the task."""
    caplog.set_level(logging.INFO, logger="pidurable")
    async with Harness.open(MemoryStorage(), models=ScriptedModels([reply(text="a")]), registry=Registry()) as h:
        conv = await h.root(agent=AGENT)
        await (await conv.submit(Input("hello"))).wait()
        task_id = await conv.compact()
        with trio.fail_after(60):
            await h.wait_for_task(task_id)
    (start,) = records(caplog, "compaction_start")
    (end,) = records(caplog, "compaction_end")
    assert (start.task_id, start.reason, start.levelno) == (task_id, "manual", logging.INFO)  # type: ignore[attr-defined]
    assert (end.task_id, end.outcome) == (task_id, "completed")  # type: ignore[attr-defined]


async def test_a_run_resumed_after_a_restart_gets_a_new_run_span(autojump_clock: trio.testing.MockClock) -> None:
    """A run cut by a close continues in the next process life under a new
    ``pidurable.run`` span marked ``resumed``, its model and tool spans its children."""
    pytest.importorskip("opentelemetry.sdk")
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    storage = MemoryStorage()
    script = [reply(tool_calls=[tool_call("t")]), reply(text="done")]
    registry = Registry()

    async def slow(call, args):  # type: ignore[no-untyped-def]
        await trio.sleep(10)
        return "ok"

    registry.install(define_tool("t", "a slow tool", {"type": "object"}, slow, replay="safe"))
    async with Harness.open(storage, models=ScriptedModels(script), registry=registry, tracer=provider.get_tracer("t")) as h:
        conv = await h.root(agent=AGENT)
        sub = await conv.submit(Input("go"))
        await trio.sleep(1)  # the tool runs; close
    exporter.clear()
    async with Harness.open(storage, models=ScriptedModels(script), registry=registry, tracer=provider.get_tracer("t")) as h:
        with trio.fail_after(60):
            assert (await (await h.submission(sub.id)).wait()).status == "done"  # type: ignore[union-attr]
            await (await h.root()).wait_idle()
    spans = exporter.get_finished_spans()
    (run,) = [s for s in spans if s.name == "pidurable.run"]
    assert run.attributes["pidurable.resumed"] is True and run.attributes["pidurable.outcome"] == "done"
    children = sorted(s.name for s in spans if s.parent is not None and s.parent.span_id == run.context.span_id)
    assert children == ["pidurable.model_request", "pidurable.tool t"]


async def test_a_run_that_ends_unanswered_by_a_model_error_is_a_warning(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """A non-retryable model error ends the run with its input
    ``unanswered/model_error``: run_end is a WARNING naming the reason."""
    caplog.set_level(logging.INFO, logger="pidurable")
    models = ScriptedModels([reply(error="401 Unauthorized")])
    async with Harness.open(MemoryStorage(), models=models, registry=Registry()) as h:
        conv = await h.root(agent=AGENT)
        sub = await conv.submit(Input("go"))
        with trio.fail_after(60):
            assert (await sub.wait()).reason == "model_error"
    (end,) = records(caplog, "run_end")
    assert end.levelno == logging.WARNING
    assert end.reasons == {sub.id: "model_error"} and end.statuses == {sub.id: "unanswered"}  # type: ignore[attr-defined]
    assert not records(caplog, "retry")


def test_may_warn_finds_a_run_ending_by_the_live_documents_id_as_builtin_address_does() -> None:
    """``_may_warn`` decodes a built-in's id inline (issue 11 item 2): a
    ``pi.live`` write of a held conversation whose run is over may warn, any
    other document id (another built-in, another conversation's, a host
    document's) not, exactly as ``builtin_address`` reads the id."""
    ended, running = Live(), Live(run=RunInfo(task_id=9, inputs=(1,)))  # type: ignore[arg-type]
    for live, warns in ((ended, True), (running, False)):
        after = SimpleNamespace(conversations={0: SimpleNamespace(live=live), 3: SimpleNamespace(live=live)})
        for document_id in range(-400, 40):
            write = PutDocument(document_id=document_id, revision=None)  # type: ignore[arg-type]
            address = builtin_address(document_id)
            expected = warns and address is not None and address[1] == LIVE_DOC and address[0] in after.conversations
            assert _may_warn((write,), after) is expected, document_id  # type: ignore[arg-type]
    assert builtin_id(3, LIVE_DOC) in range(-400, 40)


async def test_the_loop_asks_whether_acts_are_observed_again_only_after_host_code_ran(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """With warnings only (Python's default), ``committed`` answers
    ``acting()``'s question for the acts of the same flush (issue 11 item 2:
    the tracer check reads the environment): False when it emitted nothing;
    after a flush that emitted a warning (a handler, host code, may have
    changed the level) it answers None and the loop asks ``acting()``."""
    caplog.set_level(logging.WARNING, logger="pidurable")
    log: list[str] = []

    class Recording(Observer):
        def committed(self, commits, now=None):  # type: ignore[no-untyped-def]
            answer = super().committed(commits, now)
            log.append(f"committed {answer} {len(records(caplog, 'retry'))}")
            return answer

        def acting(self) -> bool:
            log.append("acting")
            return super().acting()

    await retry_then_answer(Recording(tracing=False))
    retried = log.index("committed None 1")
    assert log[retried + 1] == "acting"  # asked again: the retry's Sleep is acted in that flush
    quiet = [i for i, entry in enumerate(log) if entry.startswith("committed False")]
    assert quiet and all(log[i + 1 : i + 2] != ["acting"] for i in quiet), log  # known: not asked again


def test_no_write_class_is_subclassed() -> None:
    """``_may_warn`` (and other readers of every commit) find a write's kind by
    exact type: no write class has a subclass whose instances are ever seen
    (the one a maker builds in, ``records.mutable_twin``, never leaves it:
    tests/core/test_records_init.py)."""
    for t in WRITE_TYPES:
        assert [s for s in t.__subclasses__() if s is not TWINS.get(t)] == [], t


def test_may_warn_finds_a_retry_or_a_troubled_outcome_among_the_tasks() -> None:
    """A task write may warn when its phase is a retry phase or its outcome
    is faulted / orphaned, wherever it is among the commit's writes."""
    after = SimpleNamespace(conversations={})
    other = PutDocument(document_id=5, revision=None)  # type: ignore[arg-type]

    def task(phase: str | None, outcome: OutcomeStatus | None) -> PutTask:
        done = None if outcome is None else SimpleNamespace(status=outcome)
        return PutTask(task=SimpleNamespace(checkpoint={} if phase is None else {"phase": phase}, outcome=done))  # type: ignore[arg-type]

    for phase in (None, "request", "retry", "summarize_retry"):
        for outcome in (None, *OutcomeStatus):
            warns = phase in ("retry", "summarize_retry") or outcome in (OutcomeStatus.FAULTED, OutcomeStatus.ORPHANED)
            for writes in ((task(phase, outcome),), (other, task("request", None), task(phase, outcome), other)):
                assert _may_warn(writes, after) is warns, (phase, outcome)  # type: ignore[arg-type]
    assert _may_warn((), after) is False  # type: ignore[arg-type]
