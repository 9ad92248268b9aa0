"""Host-defined documents: ``define_doc`` and the updates the reducer resolves.

Theory of operation
-------------------
A definition (``define_doc``) is host code: a schema (a JSON schema dict,
checked with ``jsonschema``, or an attrs class, converted with the codec's
cattrs converter), an initial value, a version and an optional ``migrate``.
The core never sees it; it sees resolved changes (core/documents.py).

An update is a function ``fn(old) -> new`` (or a plain new value). It is
*staged* where it is asked for - a host call, a tool body, a task phase -
and *resolved* on the reducer right before the event that carries it is
stepped (``DocumentUpdates.resolve``, called by the loop like ``enrich``):
the functions run on the value the core holds at that moment (migrated
lazily if it is stored at an older version), the result is checked at the
edge (strict JSON, valid text: NaN, infinities, lone surrogates are
``InvalidInput``) and against the schema, and the event is stepped with the
ops from the old value to the new one (``chord.diff``): what is journaled
and stored is O(delta). Because every change to a document is resolved on
the reducer in step order, an update never works from a stale value and two
racing updates never lose one another. The functions also run once when
staged (``preview``), so a bad update raises where it was asked for.

Where a resolution fails: a host update is refused (``InvalidInput``, nothing
stored); a tool's staged update fails the call (its result says why, and no
change is stored); a phase's ``runtime.commit`` is refused.

Versions: a stored version older than the definition is migrated on every
read, and written back (a base) with the next update; a stored version newer
than the definition is refused with a message naming both.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import attrs
import cattrs
import jsonschema

from pidurable.core.bounds import is_int_in
from pidurable.core.builtins import BUILTINS
from pidurable.core.chord import diff
from pidurable.core.effects import Refusal, Refused, Respond
from pidurable.core.events import DocumentUpdateRequested, Event, TaskCommitRequested, ToolFailed, ToolFinished
from pidurable.core.state import AGENT_DOC, DocHistory, DocKey, DocScope, DocumentChange, DocumentState, ForkPolicy, State

from .doc_types import DocDefinition
from .strict_json import check_definition_json
from .host_input import check_json
from .errors import InvalidInput
from .storage import codec

if TYPE_CHECKING:
    from .registry import Registry

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,63}$")

Json = Any
#: ``fn(old) -> new``, or a plain new value.
Update = Any


def to_host(doc: DocDefinition, value: Json) -> Any:
    """The stored JSON as the host sees it (an attrs instance, or a copy
    of the JSON the host may change freely)."""
    if doc.typed:
        try:
            return codec.converter.structure(value, doc.schema)
        except (cattrs.BaseValidationError, TypeError, ValueError, KeyError) as e:
            raise InvalidInput(f"Document {doc.kind!r}: the stored value does not fit {doc.schema.__name__}: {e}") from None
    return copy.deepcopy(value)


def to_json(doc: DocDefinition, value: Any) -> Json:
    """A host value as checked JSON (``InvalidInput`` if it is not)."""
    if doc.typed:
        if not isinstance(value, doc.schema):
            raise InvalidInput(f"Document {doc.kind!r} holds a {doc.schema.__name__}, not {type(value).__name__}")
        value = codec.converter.unstructure(value)
    check_json(value, f"Document {doc.kind!r}")
    if not doc.typed:
        problem = _problem(doc.schema, value)
        if problem is not None:
            raise InvalidInput(f"Document {doc.kind!r} does not fit its schema: {problem}")
    return value


def initial_json(doc: DocDefinition) -> Json:
    value = doc.initial() if callable(doc.initial) and not doc.typed else doc.initial
    if doc.typed and callable(value) and not isinstance(value, doc.schema):
        value = value()
    return to_json(doc, value)


def current(doc: DocDefinition, stored: DocumentState | None) -> tuple[Json, bool]:
    """The value at this definition's version, and whether storing a
    change needs a base (a new document, or a migrated one)."""
    if stored is None:
        return initial_json(doc), True
    if stored.version > doc.version:
        raise InvalidInput(
            f"Document {doc.kind!r} is stored at version {stored.version}, newer than the installed "
            f"definition (version {doc.version}); install the newer definition to read or change it"
        )
    if stored.version < doc.version:
        if doc.migrate is None:
            raise InvalidInput(
                f"Document {doc.kind!r} is stored at version {stored.version} and its definition "
                f"(version {doc.version}) has no migrate()"
            )
        try:
            migrated = doc.migrate(stored.version, copy.deepcopy(stored.value))
        except InvalidInput:
            raise
        except Exception as e:  # host code
            raise InvalidInput(f"Document {doc.kind!r}: migrate() from version {stored.version} failed: {e}") from None
        return to_json(doc, migrated), True
    return stored.value, False


_VALIDATORS: dict[int, tuple[dict[str, Any], Any]] = {}


def _problem(schema: dict[str, Any], value: Json) -> str | None:
    hit = _VALIDATORS.get(id(schema))
    if hit is None or hit[0] is not schema:
        hit = _VALIDATORS[id(schema)] = (schema, jsonschema.Draft202012Validator(schema))
    errors = sorted(hit[1].iter_errors(value), key=lambda e: list(e.absolute_path))
    if not errors:
        return None
    return "; ".join(
        (f"{'/'.join(str(p) for p in e.absolute_path)}: {e.message}" if e.absolute_path else e.message) for e in errors[:5]
    )


def define_doc(
    kind: str,
    schema: dict[str, Any] | type,
    initial: Any,
    *,
    fork: str = "as_of",
    history: str = "rewindable",
    version: int = 1,
    migrate: Callable[[int, Json], Any] | None = None,
    scope: str = "conversation",
) -> DocDefinition:
    """Define a document kind (docs/documents.md). ``schema`` is a JSON
    schema dict or an attrs class; ``initial`` a value (or a function making
    one); ``history`` ``rewindable`` (every revision kept) or ``latest``
    (older revisions reclaimed); ``fork`` ``as_of`` (needs ``rewindable``),
    ``current`` or ``initial``; ``scope`` ``conversation`` or ``task``
    (retired when the task ends). Bad definitions fail here, loudly."""
    if not isinstance(kind, str) or not _NAME.match(kind) or kind.startswith("pi."):
        raise ValueError(f"Document kind {kind!r} must match {_NAME.pattern} and not start with 'pi.'")
    try:
        scope_, fork_, history_ = DocScope(scope), ForkPolicy(fork), DocHistory(history)
    except ValueError as e:
        raise ValueError(f"Document {kind}: {e}") from None
    if fork_ is ForkPolicy.AS_OF and history_ is not DocHistory.REWINDABLE:
        raise ValueError(f"Document {kind}: fork='as_of' needs history='rewindable'")
    if not is_int_in(version, 1):
        raise ValueError(f"Document {kind}: version must be a positive integer (at most 2**63 - 1)")
    if migrate is not None and not callable(migrate):
        raise TypeError(f"Document {kind}: migrate must be a function (old_version, value) -> value")
    if isinstance(schema, type):
        if not attrs.has(schema):
            raise TypeError(f"Document {kind}: schema must be a JSON schema dict or an attrs class")
    elif isinstance(schema, dict):
        try:
            jsonschema.Draft202012Validator.check_schema(schema)
        except jsonschema.SchemaError as e:
            raise ValueError(f"Document {kind}: schema is not a valid JSON Schema: {e.message}") from None
        check_definition_json(schema, f"Document {kind}: schema")
    else:
        raise TypeError(f"Document {kind}: schema must be a JSON schema dict or an attrs class")
    doc = DocDefinition(
        kind=kind, schema=schema, initial=initial, scope=scope_, fork=fork_, history=history_, version=version, migrate=migrate
    )
    try:
        initial_json(doc)
    except InvalidInput as e:
        raise ValueError(f"Document {kind}: the initial value is refused: {e}") from None
    return doc


# --- staged updates, resolved on the reducer -------------------------------------------


@attrs.frozen(kw_only=True)
class Staged:
    """One update of one document, where it was asked for."""

    doc: DocDefinition
    owner: int
    update: Update

    @property
    def key(self) -> DocKey:
        return (self.doc.scope, self.owner, self.doc.kind)


def _run(doc: DocDefinition, host: Any, update: Update) -> Any:
    if not callable(update) or (doc.typed and isinstance(update, doc.schema)):
        return update
    try:
        return update(host)
    except InvalidInput:
        raise
    except Exception as e:  # host code: the update is refused, the harness goes on
        raise InvalidInput(f"Document {doc.kind!r}: the update function raised {type(e).__name__}: {e}") from None


def resolve_changes(documents: Any, staged: Sequence[Staged]) -> tuple[tuple[DocumentChange, ...], dict[DocKey, Any]]:
    """Run the staged updates on the current values (``documents``: the
    core's live documents by key): one change per document, in first-staged
    order, and each document's new host value. Raises ``InvalidInput``."""
    order: list[DocKey] = []
    by_key: dict[DocKey, list[Staged]] = {}
    for s in staged:
        if s.key not in by_key:
            order.append(s.key)
        by_key.setdefault(s.key, []).append(s)
    changes, values = [], {}
    for key in order:
        group = by_key[key]
        doc = group[0].doc
        old, rebase = current(doc, documents.get(key))
        host = to_host(doc, old)
        for s in group:
            host = _run(doc, host, s.update)
        new = to_json(doc, host)
        ops = (["r", new],) if rebase else diff(old, new)
        values[key] = to_host(doc, new)
        changes.append(
            DocumentChange(
                scope=doc.scope, owner=key[1], kind=doc.kind, version=doc.version, history=doc.history, fork=doc.fork, ops=ops
            )
        )
    return tuple(changes), values


class DocumentUpdates:
    """Updates staged for events not yet stepped, by ``("ticket", n)``
    (host requests, phase commits) or ``("task", id)`` (a tool's result).
    The loop owns one; host code reaches it through ``DocumentPort``."""

    def __init__(self, state: Callable[[], State]) -> None:
        self._state = state
        self._pending: dict[tuple[str, int], list[Staged]] = {}
        #: Set by ``Harness.open``: where definitions are looked up.
        self.registry: Registry | None = None
        #: Set by the loop: a stored document by (scope, owner, kind).
        self.stored: Callable[[DocScope, int, str], DocumentState | None] | None = None

    def definition(self, doc_or_kind: Any) -> DocDefinition:
        if isinstance(doc_or_kind, DocDefinition):
            installed = self.registry.doc(doc_or_kind.kind) if self.registry is not None else None
            if installed is None:
                raise InvalidInput(f"Document {doc_or_kind.kind!r} is not installed (registry.install(doc))")
            return installed
        if not isinstance(doc_or_kind, str):
            raise InvalidInput(f"A document is named by its definition or its kind, not a {type(doc_or_kind).__name__}")
        if doc_or_kind in BUILTINS:
            spec = BUILTINS[doc_or_kind]
            raise InvalidInput(
                f"Document {doc_or_kind!r} is built in: a host reads it (conv.document({doc_or_kind!r})) but never "
                f"changes it{' (conv.configure changes the agent)' if doc_or_kind == AGENT_DOC else ''}, "
                f"and a fork takes it by its own policy ({spec.fork.value})"
            )
        found = self.registry.doc(doc_or_kind) if self.registry is not None else None
        if found is None:
            raise InvalidInput(f"No document definition {doc_or_kind!r} is installed")
        return found

    def preview(self, staged: Sequence[Staged]) -> dict[DocKey, Any]:
        """Run ``staged`` now on the current values (raises where it was
        asked for); the new host values by key. A document of a conversation
        the core does not hold (settled: core/holding.py) is read from storage."""
        state = self._state()
        docs: Mapping[DocKey, DocumentState] = state.documents
        away = {
            s.key for s in staged
            if s.key[0] is DocScope.CONVERSATION and s.key[1] not in state.conversations and s.key not in docs
        }
        if away and self.stored is not None:
            docs = {**docs, **{k: d for k in sorted(away) if (d := self.stored(*k)) is not None}}
        return resolve_changes(docs, staged)[1]

    def conversations(self, event: Event) -> list[int]:
        """The conversations whose documents ``event``'s staged updates change."""
        if not self._pending:
            return []  # nothing staged (the usual case: asked of every result event)
        key = self._key(event)
        pending = self._pending.get(key) if key is not None else None
        return sorted({s.owner for s in pending or () if s.doc.scope is DocScope.CONVERSATION})

    def stage(self, key: tuple[str, int], staged: Sequence[Staged]) -> None:
        if staged:
            self._pending.setdefault(key, []).extend(staged)

    def drop(self, key: tuple[str, int]) -> None:
        self._pending.pop(key, None)

    def _key(self, event: Event) -> tuple[str, int] | None:
        if isinstance(event, ToolFinished):
            return ("task", event.task_id)
        if isinstance(event, (DocumentUpdateRequested, TaskCommitRequested)):
            return ("ticket", event.ticket)
        return None

    def waiting(self, event: Event) -> bool:
        """Does ``event`` carry staged updates to resolve before its step?"""
        if not self._pending:
            return False
        key = self._key(event)
        return key is not None and key in self._pending

    def resolve(self, event: Event, state: State) -> Event | Respond:
        """``event`` with its changes (see the module comment), or the
        refusal to answer instead of stepping it."""
        key = self._key(event)
        assert key is not None
        staged = self._pending.pop(key, [])
        try:
            changes, _ = resolve_changes(state.documents, staged)
        except InvalidInput as e:
            if isinstance(event, ToolFinished):
                message = f"The tool's document update was refused: {e}"
                return ToolFailed(now=event.now, task_id=event.task_id, message=message)
            assert isinstance(event, (DocumentUpdateRequested, TaskCommitRequested))
            return Respond(ticket=event.ticket, reply=Refused(kind=Refusal.INVALID, message=str(e)))
        if isinstance(event, DocumentUpdateRequested):
            return attrs.evolve(event, change=changes[0]) if changes else event
        assert isinstance(event, (ToolFinished, TaskCommitRequested))
        return attrs.evolve(event, documents=changes)





class DocumentPort(Protocol):
    """What host code staging updates reaches (the loop's ``DocumentUpdates``)."""

    def definition(self, doc_or_kind: Any) -> DocDefinition: ...

    def preview(self, staged: Sequence[Staged]) -> dict[DocKey, Any]: ...

    def stage(self, key: tuple[str, int], staged: Sequence[Staged]) -> None: ...


class Staging:
    """The updates one tool call or one phase stages (``update``), checked
    as they are asked for, handed to the reducer with the event that
    commits them (``hand_over``)."""

    __slots__ = ("port", "task_id", "conversation_id", "staged")  # (one per tool body: no __dict__, issue 11 item 2)

    def __init__(self, port: DocumentPort | None, *, task_id: int, conversation_id: int) -> None:
        self.port, self.task_id, self.conversation_id = port, task_id, conversation_id
        self.staged: list[Staged] = []

    async def update(self, doc: Any, update: Update) -> Any:
        if self.port is None:
            raise RuntimeError("documents cannot be updated here (no harness)")
        definition = self.port.definition(doc)
        owner = self.task_id if definition.scope is DocScope.TASK else self.conversation_id
        staged = Staged(doc=definition, owner=owner, update=update)
        values = self.port.preview([*self.staged, staged])
        self.staged.append(staged)
        return values[staged.key]

    def hand_over(self, key: tuple[str, int]) -> None:
        """Give the staged updates to the event ``key`` names (then forget them)."""
        if self.port is not None and self.staged:
            self.port.stage(key, self.staged)
        self.staged = []
__all__ = ["DocDefinition", "DocumentPort", "DocumentUpdates", "Staged", "Staging", "define_doc", "resolve_changes"]
