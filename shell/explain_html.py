"""``pidurable replay --explain --html FILE``: the same story as
:mod:`.explain`, as one self-contained page (no server, no scripts, no
network): a section per commit with its story, and the live task tree after
it (each task with its kind, status and phase, nested under its owner).

The tree after a commit is the state the next commit of the same process
life was stepped on (replay recomputes it; ``Transition.before``); the last
commit of a life shows the tree its process left behind, as far as the
journal says (the next life reopens from the store).
"""

from __future__ import annotations

import html
from collections.abc import Sequence

from pidurable.core.model import Task
from pidurable.core.state import State

from .explain import _story
from .journal import Transition, replay
from .storage.base import JournalRow

_STYLE = """
body{font:15px/1.5 system-ui,-apple-system,Segoe UI,sans-serif;margin:0;background:#fafafa;color:#1d1d1f}
header{padding:24px 32px;background:#1d1d1f;color:#fff}header h1{margin:0;font-size:20px}
header p{margin:4px 0 0;color:#bbb}main{max-width:1100px;margin:0 auto;padding:16px 24px}
section{display:grid;grid-template-columns:minmax(0,3fr) minmax(0,2fr);gap:16px;background:#fff;
border:1px solid #e5e5e5;border-radius:10px;margin:12px 0;padding:12px 16px}
section.life{border-left:4px solid #c2410c}h2{grid-column:1/-1;margin:0;font-size:15px}
pre{margin:0;white-space:pre-wrap;font:13px/1.45 ui-monospace,Menlo,Consolas,monospace}
ul{margin:0;padding-left:18px;font:13px/1.5 ui-monospace,Menlo,Consolas,monospace}
.tree h3{margin:0 0 4px;font-size:13px;color:#666;font-weight:600}.none{color:#999}
.terminal{color:#999}.running{color:#15803d}.waiting{color:#a16207}.pending{color:#1d4ed8}
@media (max-width:700px){section{grid-template-columns:1fr}}
"""


def _tree(state: State | None) -> str:
    if state is None or not state.tasks:
        return '<p class="none">no live task</p>'
    tasks = dict(state.tasks)
    children: dict[int | None, list[Task]] = {}
    for t in sorted(tasks.values(), key=lambda t: t.id):
        owner = t.owner if t.owner in tasks else None
        children.setdefault(owner, []).append(t)

    def render(owner: int | None) -> str:
        items = []
        for t in children.get(owner, []):
            label = f"#{t.id} {t.kind} {t.status.value}" + (f" at {t.phase}" if t.phase else "")
            if t.abort_requested:
                label += " (abort marked)"
            if t.on:
                label += " waiting on " + ", ".join(f"#{i}" for i in t.on)
            items.append(f'<li class="{html.escape(t.status.value)}">{html.escape(label)}{render(t.id)}</li>')
        return f"<ul>{''.join(items)}</ul>" if items else ""

    return render(None)


def explain_html(
    rows: Sequence[JournalRow],
    *,
    source: str = "journal",
    conversation: int | None = None,
    first: int | None = None,
    last: int | None = None,
) -> str:
    """The page (see the module comment)."""
    transitions: list[Transition] = list(replay(rows))
    sections: list[str] = []
    life = 0
    for n, (row, t) in enumerate(zip(rows, transitions, strict=True)):
        life += t.opens
        if (first is not None and t.seq < first) or (last is not None and t.seq > last):
            continue
        story = [line for line in _story(row, t, life, conversation) if line.strip()]
        if not story:
            continue
        after = transitions[n + 1].before if n + 1 < len(transitions) and not transitions[n + 1].opens else None
        title = f"commit {t.seq}" + (f" - process life {life} opens" if t.opens else "")
        sections.append(
            f'<section class="{"life" if t.opens else ""}"><h2>{html.escape(title)}</h2>'
            f"<pre>{html.escape(chr(10).join(story))}</pre>"
            f'<div class="tree"><h3>live tasks after it</h3>{_tree(after) if after is not None else _tree_end(t)}</div>'
            "</section>"
        )
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        f"<title>pidurable replay --explain: {html.escape(source)}</title><style>{_STYLE}</style></head><body>"
        f"<header><h1>What happened, commit by commit</h1><p>{html.escape(source)} - {len(rows)} commits, "
        f"{sum(t.opens for t in transitions)} process lives</p></header><main>{''.join(sections)}</main></body></html>\n"
    )


def _tree_end(t: Transition) -> str:
    return '<p class="none">(the last commit of its process life: what it left is what the next life reopens)</p>'


def write_explain_html(rows: Sequence[JournalRow], out: str, **kw: object) -> int:
    """Write the page to ``out``; the number of bytes written."""
    text = explain_html(rows, **kw)  # type: ignore[arg-type]
    with open(out, "w", encoding="utf-8") as f:
        f.write(text)
    return len(text.encode("utf-8"))


__all__ = ["explain_html", "write_explain_html"]
