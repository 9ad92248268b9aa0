"""Tool output limits (shell/limits.py): bounded text, the record of the cut and its diagnostics, the spill."""

from __future__ import annotations

from pathlib import Path

import pytest

from pidurable.core import diagnostics
from pidurable.shell.limits import OutputLimits, Spill, bound


def test_small_output_is_untouched() -> None:
    """Output within the limits is kept whole, and nothing is dropped."""
    b = bound("a\nb\n", OutputLimits())
    assert not b.truncated and b.text == "a\nb\n" and b.kept_bytes == b.total_bytes == 4 and b.kept_lines == 2


def test_head_keeps_whole_lines_under_both_limits() -> None:
    text = "".join(f"line {i}\n" for i in range(5000))
    b = bound(text, OutputLimits(max_lines=2000))
    assert b.truncated and b.kept_lines == 2000 and b.text.startswith("line 0\n") and b.text.endswith("line 1999\n")
    b = bound(text, OutputLimits(max_bytes=100))
    assert b.kept_bytes <= 100 and b.text.endswith("\n") and b.text.startswith("line 0")
    cut = b.record("/tmp/out.txt")
    assert cut == {
        "total_bytes": len(text),
        "total_lines": 5000,
        "kept_bytes": b.kept_bytes,
        "kept_lines": b.kept_lines,
        "retain": "head",
        "full_output": "/tmp/out.txt",
    }
    first, last = diagnostics.from_cut(cut)
    assert diagnostics.block([*first, *last]) == (
        "<harness>\n[info] Full output: /tmp/out.txt\n"
        f"[warn] Output truncated to its beginning: {5000 - b.kept_lines} lines, {len(text) - b.kept_bytes} bytes dropped\n"
        "</harness>"
    )


def test_tail_keeps_the_end_and_says_so() -> None:
    """``retain="tail"`` keeps the last lines; the diagnostic says "to its end" and counts what was dropped."""
    text = "".join(f"{i}\n" for i in range(10)) + "ERROR at the end\n"
    b = bound(text, OutputLimits(max_lines=2, retain="tail"))
    assert b.text == "9\nERROR at the end\n"
    assert diagnostics.from_cut(b.record(None)) == ((), (diagnostics.truncated(9, 18, "tail"),))
    assert diagnostics.from_cut(b.record(None))[1][0].message == "Output truncated to its end: 9 lines, 18 bytes dropped"


def test_one_huge_line_is_cut_on_a_character_boundary() -> None:
    text = "é" * 100_000  # 2 bytes each, no newline
    b = bound(text, OutputLimits(max_bytes=1001))
    assert b.truncated and b.kept_bytes <= 1001 and set(b.text) == {"é"}
    b = bound(text, OutputLimits(max_bytes=1001, retain="tail"))
    assert b.kept_bytes <= 1001 and set(b.text) == {"é"}


def test_a_megabyte_output_keeps_only_the_limit() -> None:
    text = "x" * 1_000_000 + "\n"
    b = bound(text, OutputLimits())
    assert b.kept_bytes <= 50 * 1024 and len(b.text) <= 50 * 1024


@pytest.mark.parametrize(
    "kw", [{"max_bytes": 0}, {"max_lines": -1}, {"retain": "middle"}, {"max_bytes": True}, {"max_lines": 1.5}]
)
def test_bad_limits_are_refused(kw: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        OutputLimits(**kw)  # type: ignore[arg-type]


def test_spill_keeps_the_newest_files_under_the_cap(tmp_path: Path) -> None:
    spill = Spill(tmp_path / "out", cap_bytes=250)
    paths = [spill.write(f"{i}.txt", "y" * 100) for i in range(4)]
    assert all(p is not None for p in paths)
    left = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert left == ["2.txt", "3.txt"]
    assert spill.write("big.txt", "z" * 1000) is None  # larger than the cap: not kept
