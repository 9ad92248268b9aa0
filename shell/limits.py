"""Tool output limits: bound what reaches the transcript, spill the rest.

Theory of operation
-------------------
A tool's text result is bounded before it is stored (reference §3.6,
"bounding"): by default 50 KiB and 2000 lines, per tool
``output_limits=OutputLimits(max_bytes, max_lines, retain="head"|"tail")``.
``head`` keeps the beginning (a file read), ``tail`` the end (a command's
output, where the error usually is). Cuts fall on line boundaries where a
line fits, else on a UTF-8 character boundary. The full text of a truncated
result is *spilled* to a file under the spill directory so a person (or the
model, with ``read``) can see it; the record of the cut (:meth:`Bounded.record`)
goes to the core, which renders it as the diagnostics the model reads after
the kept text (core/diagnostics.py): ``[info] Full output: <path>`` and
``[warn] Output truncated to its end: 79234 lines, 997376 bytes dropped``.
The spill directory is bounded: the oldest spill files are removed once the
directory holds more than ``cap_bytes``.

A 1 MB command output therefore never reaches the transcript or the store
whole: only the bounded text and the diagnostics are committed.

*Running output* (``ToolCallContext.report_output``, bash's streamed
stdout/stderr) is kept in a :class:`RunningOutput`: only its last
``LIVE_OUTPUT_BYTES`` (CRLF normalized, control characters other than tab and
newline removed) ever reach ``pi.live``, throttled by the tool interpreter.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path
from typing import Any

import attrs

from pidurable.core.model import Json

log = logging.getLogger("pidurable")

#: The reference's defaults: 50 KiB and 2000 lines per result.
DEFAULT_MAX_BYTES = 50 * 1024
DEFAULT_MAX_LINES = 2000
#: Spill files kept per store (oldest removed first).
DEFAULT_SPILL_CAP_BYTES = 256 * 1024 * 1024
#: How much of a running body's output its live slot shows (the tail).
LIVE_OUTPUT_BYTES = 4 * 1024


@attrs.frozen(kw_only=True)
class OutputLimits:
    """How much of a tool's output the model (and the store) gets."""

    max_bytes: int = DEFAULT_MAX_BYTES
    max_lines: int = DEFAULT_MAX_LINES
    #: ``head`` keeps the start, ``tail`` the end.
    retain: str = "head"

    def __attrs_post_init__(self) -> None:
        if isinstance(self.max_bytes, bool) or not isinstance(self.max_bytes, int) or self.max_bytes < 1:
            raise ValueError(f"output_limits.max_bytes must be a positive int, not {self.max_bytes!r}")
        if isinstance(self.max_lines, bool) or not isinstance(self.max_lines, int) or self.max_lines < 1:
            raise ValueError(f"output_limits.max_lines must be a positive int, not {self.max_lines!r}")
        if self.retain not in ("head", "tail"):
            raise ValueError(f"output_limits.retain must be 'head' or 'tail', not {self.retain!r}")


def output_limits(value: Any, what: str) -> OutputLimits:
    """A tool's ``output_limits`` as given to ``define_tool``: None (the
    defaults), an :class:`OutputLimits`, or the tuple ``(max_bytes,
    max_lines[, retain])``; anything else raises ``ValueError`` naming ``what``."""
    if value is None:
        return OutputLimits()
    if isinstance(value, OutputLimits):
        return value
    if isinstance(value, tuple) and len(value) in (2, 3):
        try:
            return OutputLimits(max_bytes=value[0], max_lines=value[1], retain=value[2] if len(value) == 3 else "head")
        except ValueError as e:
            raise ValueError(f"{what}: {e}") from None
    raise ValueError(
        f"{what}: output_limits must be None, an OutputLimits or a tuple (max_bytes, max_lines, retain), not {value!r}"
    )


_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f]")


class RunningOutput:
    """The tail of a body's running output, at most ``cap`` bytes of text."""

    def __init__(self, cap: int = LIVE_OUTPUT_BYTES) -> None:
        self.cap = cap
        self._text = ""
        #: bumped by every append (the throttle sends only after a change)
        self.version = 0

    def append(self, chunk: str) -> None:
        if not chunk:
            return
        chunk = _CONTROL.sub("", chunk.replace("\r\n", "\n").replace("\r", "\n"))
        text = self._text + chunk
        if len(text) > self.cap:  # characters >= bytes / 4: cut cheaply, then exactly
            text = text[-self.cap :]
        self._text = _cut_bytes(text, self.cap, from_end=True)
        self.version += 1

    def text(self) -> str:
        return self._text


@attrs.frozen(kw_only=True)
class Bounded:
    """A bounded text and what was cut."""

    text: str
    truncated: bool
    #: Which end was kept (``head`` or ``tail``).
    retain: str
    total_bytes: int
    total_lines: int
    kept_bytes: int
    kept_lines: int

    def record(self, path: str | None) -> dict[str, Json]:
        """The structured record of the cut (``ToolFinished.truncated``, kept
        in the result entry's ``data["truncated"]``); ``path``: the spill."""
        out: dict[str, Json] = {
            "total_bytes": self.total_bytes,
            "total_lines": self.total_lines,
            "kept_bytes": self.kept_bytes,
            "kept_lines": self.kept_lines,
            "retain": self.retain,
        }
        if path is not None:
            out["full_output"] = path
        return out


def _lines(text: str) -> list[str]:
    return text.splitlines(keepends=True)


def _cut_bytes(text: str, max_bytes: int, from_end: bool) -> str:
    data = text.encode("utf-8")
    if len(data) <= max_bytes:
        return text
    piece = data[-max_bytes:] if from_end else data[:max_bytes]
    return piece.decode("utf-8", errors="ignore")  # drop a split character


def bound(text: str, limits: OutputLimits) -> Bounded:
    """``text`` cut to ``limits`` (whole lines where they fit)."""
    lines = _lines(text)
    total_bytes = len(text.encode("utf-8"))
    if total_bytes <= limits.max_bytes and len(lines) <= limits.max_lines:
        return Bounded(
            text=text,
            truncated=False,
            retain=limits.retain,
            total_bytes=total_bytes,
            total_lines=len(lines),
            kept_bytes=total_bytes,
            kept_lines=len(lines),
        )
    tail = limits.retain == "tail"
    ordered = list(reversed(lines)) if tail else lines
    kept: list[str] = []
    size = 0
    for line in ordered[: limits.max_lines]:
        n = len(line.encode("utf-8"))
        if size + n > limits.max_bytes:
            if not kept:  # one line longer than the budget: cut inside it
                kept.append(_cut_bytes(line, limits.max_bytes, from_end=tail))
            break
        kept.append(line)
        size += n
    if tail:
        kept.reverse()
    out = "".join(kept)
    return Bounded(
        text=out,
        truncated=True,
        retain=limits.retain,
        total_bytes=total_bytes,
        total_lines=len(lines),
        kept_bytes=len(out.encode("utf-8")),
        kept_lines=len(_lines(out)),
    )


class Spill:
    """Writes full outputs to files in ``directory``, at most ``cap_bytes`` in
    all - counting (and evicting) only the files whose name starts with
    ``prefix`` (one store's, when stores share a directory)."""

    def __init__(
        self, directory: str | os.PathLike[str], cap_bytes: int = DEFAULT_SPILL_CAP_BYTES, prefix: str = ""
    ) -> None:
        self.directory = Path(directory)
        self.cap_bytes = cap_bytes
        self.prefix = prefix

    def write(self, name: str, text: str) -> str | None:
        """Store ``text`` as ``name``; returns its path, or None (logged) when
        it cannot be written or is larger than the cap."""
        data = text.encode("utf-8")
        if len(data) > self.cap_bytes:
            log.warning("tool output of %d bytes is larger than the spill cap; not kept", len(data))
            return None
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            path = self.directory / name
            path.write_bytes(data)
            self._evict(keep=path)
        except OSError as e:
            log.warning("cannot spill tool output to %s: %s", self.directory, e)
            return None
        return str(path)

    def _evict(self, keep: Path) -> None:
        files = []
        for p in self.directory.iterdir():
            if not p.name.startswith(self.prefix):
                continue
            try:
                st = p.stat()
            except OSError:
                continue
            if p.is_file():
                files.append((st.st_mtime_ns, p.name, p, st.st_size))
        total = sum(size for *_, size in files)
        for _, _, p, size in sorted(files):
            if total <= self.cap_bytes:
                break
            if p == keep:
                continue
            try:
                p.unlink()
                total -= size
            except OSError as e:
                log.warning("cannot remove spill file %s: %s", p, e)
