"""Open and resume: what reopening a store costs, by what the store holds.

Stores (SQLite WAL synchronous=NORMAL, scripted model, no-op tool):
- settled-N: N conversations (N = 10, 1,000, 10,000 by default), each created
  with ``Harness.create_conversation`` and given one input that the scripted
  model answers with one short text; all settled, nothing live.
- long-R: one conversation of R tool rounds (R = 10,000 by default: the
  workload of bench/steps.py, 4R+1 durable steps), settled.

Each store is built once (a fast path: --build-workers conversations at a
time) and cached under <tmp>/pidurable-bench-stores/<hash of core/ and shell/
sources>/, so a store is always written by the code under test; --rebuild
forces it, --cache-dir moves it.

Each measurement copies the cached store to a scratch directory (the copy is
in the page cache: this is a warm open) and runs in a fresh child process:
- open: from ``open_sqlite_storage`` to ``Harness.open`` yielding (load,
  recovery, the first commit);
- answer: one more input to one settled conversation (for long-R: the long
  one), from submit to the answer: the request reads the conversation's
  context;
- CPU: the child's CPU time for open + answer (less disturbed than wall
  time on a busy machine);
- close: leaving the harness (checkpoint, unlock);
- peak RSS: the child's own peak (VmHWM).
Medians of --repeat (default 3).

    python bench/recovery.py                 # 10 / 1,000 / 10,000 settled + long 10,000 rounds
    python bench/recovery.py --quick         # 10 / 1,000 settled + long 1,000 rounds, 1 repeat
    python bench/recovery.py --settled 10 100000 --long-rounds 0

Printed, never asserted.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent))
import children  # noqa: E402
from workload import (  # noqa: E402
    AGENT,
    answering_models,
    code_version,
    dir_bytes,
    machine,
    make_models,
    make_registry,
    mixed_versions,
    peak_rss_mb,
    source_fingerprint,
)

from pidurable.shell import Harness, Input, open_sqlite_storage  # noqa: E402

STORE = "store.sqlite"


# ---------------------------------------------------------------- building


async def build_settled(path: Path, n: int, workers: int) -> int:
    """n conversations, each answered once; returns the one to resume (the middle one)."""
    ids: list[int] = []
    todo = iter(range(n))
    storage = open_sqlite_storage(path)
    async with Harness.open(storage, models=answering_models("hello"), registry=make_registry()) as h:

        async def worker() -> None:
            for _ in todo:
                conv = await h.create_conversation(agent=AGENT)
                sub = await conv.submit(Input("hi"))
                rec = await sub.wait()
                assert rec.status == "done", rec
                ids.append(conv.id)

        async with trio.open_nursery() as nursery:
            for _ in range(min(workers, n)):
                nursery.start_soon(worker)
    return sorted(ids)[len(ids) // 2]


async def build_long(path: Path, rounds: int) -> int:
    storage = open_sqlite_storage(path)
    async with Harness.open(storage, models=make_models(rounds), registry=make_registry()) as h:
        conv = await h.root(agent=AGENT)
        rec = await (await conv.submit(Input("go"))).wait()
        assert rec.status == "done", rec
    return int(conv.id)


def cached_store(cache: Path, name: str, build: Any, rebuild: bool) -> tuple[Path, dict[str, Any]]:
    """The cached store directory for ``name``, built by ``build(path)`` if absent."""
    d = cache / name
    meta_file = d / "meta.json"
    if meta_file.exists() and not rebuild:
        return d, json.loads(meta_file.read_text())
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    print(f"# building {name} in {d} ...", file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    conversation = trio.run(build, d / STORE)
    meta = {
        "conversation": conversation,
        "build_s": round(time.perf_counter() - t0, 1),
        "bytes": dir_bytes(d),
        "source": source_fingerprint(),
    }
    meta_file.write_text(json.dumps(meta))
    print(f"# built {name} in {meta['build_s']} s, {meta['bytes'] / 1e6:.1f} MB", file=sys.stderr, flush=True)
    return d, meta


# ---------------------------------------------------------------- measuring (child)


async def measure(path: Path, conversation: int) -> dict[str, Any]:
    c0 = time.process_time()
    t0 = time.perf_counter()
    storage = open_sqlite_storage(path)
    async with Harness.open(storage, models=answering_models("again"), registry=make_registry()) as h:
        t1 = time.perf_counter()
        conv = await h.conversation(conversation)
        assert conv is not None, conversation
        rec = await (await conv.submit(Input("again"))).wait()
        assert rec.status == "done", rec
        t2 = time.perf_counter()
        c2 = time.process_time()
    t3 = time.perf_counter()
    return {"open_s": t1 - t0, "answer_s": t2 - t1, "close_s": t3 - t2, "cpu_s": c2 - c0}


def child(args: argparse.Namespace) -> None:
    source = source_fingerprint()  # what was just imported (the tree may change under a long run)
    out = trio.run(measure, Path(args.child), args.conversation)
    out["peak_rss_mb"] = peak_rss_mb()
    out["source"] = source
    children.report(out)


def spawn(store_dir: Path, conversation: int, timeout: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-recovery-") as scratch:
        for f in store_dir.iterdir():
            if f.name.startswith(STORE) and not f.name.endswith((".owner", "-shm")):
                shutil.copy2(f, scratch)
        cmd = [sys.executable, __file__, "--child", str(Path(scratch) / STORE), "--conversation", str(conversation)]
        out, why = children.run(cmd, timeout, why_lines=40)
    if out is None:
        raise SystemExit(f"measuring {store_dir} failed:\n{why}")
    return out


# ---------------------------------------------------------------- parent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--settled", type=int, nargs="*", default=[10, 1000, 10000], help="settled conversations per store")
    ap.add_argument("--long-rounds", type=int, default=10000, help="rounds of the long conversation (0: none)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="settled 10 and 1,000, long 1,000 rounds, one repeat")
    ap.add_argument("--build-workers", type=int, default=16, help="conversations built at once")
    ap.add_argument("--cache-dir", type=Path, help="default: <tmp>/pidurable-bench-stores/<source hash>")
    ap.add_argument("--rebuild", action="store_true", help="build the stores again")
    ap.add_argument("--timeout", type=float, default=900.0, help="per child (s)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--conversation", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args)
        return
    if args.quick:
        args.settled, args.long_rounds, args.repeat = [10, 1000], 1000, 1
    cache = args.cache_dir or Path(tempfile.gettempdir()) / "pidurable-bench-stores" / source_fingerprint()

    stores: list[tuple[str, Path, dict[str, Any]]] = []
    t_all = time.perf_counter()
    for n in args.settled:
        build = partial(build_settled, n=n, workers=args.build_workers)
        d, meta = cached_store(cache, f"settled-{n}", build, args.rebuild)
        stores.append((f"{n:,} settled conversations", d, meta))
    if args.long_rounds:
        d, meta = cached_store(cache, f"long-{args.long_rounds}", partial(build_long, rounds=args.long_rounds), args.rebuild)
        stores.append((f"1 conversation of {args.long_rounds:,} rounds", d, meta))

    rows: dict[str, list[dict[str, Any]]] = {}
    for rep in range(args.repeat):
        for label, d, meta in stores:
            res = spawn(d, meta["conversation"], args.timeout)
            rows.setdefault(label, []).append(res)
            print(f"# repeat {rep + 1}/{args.repeat} {label}: open {res['open_s'] * 1000:.0f} ms", file=sys.stderr, flush=True)

    def med(label: str, key: str) -> float:
        return statistics.median(r[key] for r in rows[label])

    print(f"## Recovery: open + one more answer, SQLite WAL NORMAL, medians of {args.repeat}")
    print(f"{time.strftime('%Y-%m-%d %H:%M')}; {machine()}; stores in {cache}; {time.perf_counter() - t_all:.0f} s")
    print(f"pidurable: {code_version()}")
    built = {str(meta.get("source", "?")) for _, _, meta in stores}
    warning = mixed_versions(built | {r["source"] for runs in rows.values() for r in runs})
    if warning:
        print(warning + " (stores and measuring children)")
    print()
    print(
        "| store | size MB | built in s | open ms | answer one more input ms | open + answer ms | "
        "open + answer CPU ms | close ms | peak RSS MB |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for label, _, meta in stores:
        o, a = med(label, "open_s") * 1000, med(label, "answer_s") * 1000
        print(
            f"| {label} | {meta['bytes'] / 1e6:.1f} | {meta['build_s']} | {o:.1f} | {a:.1f} | "
            f"{statistics.median((r['open_s'] + r['answer_s']) * 1000 for r in rows[label]):.1f} | "
            f"{med(label, 'cpu_s') * 1000:.1f} | "
            f"{med(label, 'close_s') * 1000:.1f} | {med(label, 'peak_rss_mb'):.0f} |"
        )


if __name__ == "__main__":
    main()
