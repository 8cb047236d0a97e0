"""Where the time to verdict of one stored `servegate gate` run goes, read from the store.

Every request of a run is in the store with its raw `perf_counter_ns` stamps (`result_json`):
from when it asked for a connection (or was sent) to its last byte. One side's *engine time* is
the union of its requests' intervals (a load block's concurrent requests count once). The
engine-bound floor of the run is the busier side's engine time — baseline and candidate are
different servers, so they could work at the same time — and the report compares the run's wall
time (`runs.started_at` → `runs.finished_at`) with it, then splits the time per gate (span, each
side's engine time, time both sides worked at once, time no request was in flight) and per kind
of request (isolation requests, A/A repeats, load blocks, …).

    servegate gate --baseline URL --candidate URL --db out/ttv.db --json out/ttv.json
    python benchmarks/time_to_verdict.py --db out/ttv.db            # the latest run
    python benchmarks/time_to_verdict.py --db out/ttv.db --run RUN_ID

`--measure SRC...` first starts two clean reference engines and runs the default `servegate gate`
(every gate) against them once per source tree given (its `src` folder goes first on
PYTHONPATH: e.g. an older commit exported with `git archive`), each into `--db`, then reports
every run it made, with the 1-minute load average before and after each:

    git archive ea1f6f6 src | tar -x -C out/before
    python benchmarks/time_to_verdict.py --db out/ttv.db --measure out/before/src src
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import sqlalchemy as sa

Interval = tuple[float, float]  # seconds on the run's perf_counter clock


@dataclass(frozen=True)
class Request:
    gate: str
    probe: str
    side: str
    start_s: float
    end_s: float


def kind(probe: str) -> str:
    """What a request was for, by its probe name."""
    if probe.endswith(":isolation"):
        return "isolation (prefix-cache reset)"
    if probe.startswith("aa:"):
        return "A/A repeat or path (noise floor)"
    if probe.startswith("load:warmup"):
        return "load warm-up"
    if probe.startswith("load:"):
        return "load blocks"
    if probe.startswith("alone:"):
        return "alone (under-load reference)"
    return "probe"


def union_s(intervals: Iterable[Interval]) -> float:
    """Total length covered by the intervals (overlaps once)."""
    total, end = 0.0, float("-inf")
    for a, b in sorted(intervals):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total


def intersect_s(a: Sequence[Interval], b: Sequence[Interval]) -> float:
    """Time covered by both sets of intervals."""
    return union_s(a) + union_s(b) - union_s([*a, *b])


def _epoch(iso: str) -> float:
    return datetime.fromisoformat(iso).timestamp()


def _stamps(result: dict[str, object]) -> tuple[int, int] | None:
    timing = result.get("timing")
    if not isinstance(timing, dict) or timing.get("sent_ns") is None:
        return None
    start = timing.get("queued_ns") or timing["sent_ns"]
    chunks = timing.get("token_chunk_ns") or ()
    end = timing.get("done_ns") or (chunks[-1] if chunks else None)
    if end is None:
        return None
    return int(start), int(end)  # type: ignore[call-overload]


def load(db: str, run_id: str | None) -> tuple[dict[str, object], list[Request], float]:
    """The run's row, its timed requests and the offset from perf_counter to epoch seconds."""
    url = db if "://" in db else f"sqlite:///{Path(db).resolve()}"
    engine = sa.create_engine(url)
    meta = sa.MetaData()
    runs = sa.Table("runs", meta, autoload_with=engine)
    requests = sa.Table("requests", meta, autoload_with=engine)
    with engine.connect() as conn:
        query = sa.select(runs).order_by(runs.c.started_at.desc())
        if run_id is not None:
            query = sa.select(runs).where(runs.c.id == run_id)
        row = conn.execute(query).mappings().first()
        if row is None:
            raise SystemExit(f"{db}: no run {run_id or ''}".rstrip())
        rows = conn.execute(
            sa.select(
                requests.c.gate, requests.c.probe, requests.c.side, requests.c.recorded_at,
                requests.c.result_json,
            ).where(requests.c.run_id == row["id"])
        ).all()  # fmt: skip
    timed, offsets = [], []
    for gate, probe, side, recorded_at, result_json in rows:
        stamps = _stamps(json.loads(result_json))
        if stamps is None:
            continue
        start_ns, end_ns = stamps
        timed.append(Request(gate, probe, side, start_ns / 1e9, end_ns / 1e9))
        offsets.append(_epoch(recorded_at) - end_ns / 1e9)
    if not timed:
        raise SystemExit(f"run {row['id']}: no timed requests")
    # Recorded right after its last byte: the median gap is the clock offset (to ~1 ms).
    return dict(row), timed, statistics.median(offsets)


def report(run: dict[str, object], reqs: list[Request], offset_s: float) -> str:
    started = _epoch(str(run["started_at"])) - offset_s
    finished = _epoch(str(run["finished_at"])) - offset_s if run["finished_at"] else None
    end = finished if finished is not None else max(r.end_s for r in reqs)
    wall = end - started
    sides = sorted({r.side for r in reqs})
    spans = {s: [(r.start_s, r.end_s) for r in reqs if r.side == s] for s in sides}
    busy = {s: union_s(v) for s, v in spans.items()}
    main = [s for s in ("baseline", "candidate") if s in busy]
    floor = max(busy[s] for s in main)
    anything = union_s(iv for v in spans.values() for iv in v)
    out = [
        f"run {run['id']} ({run['verdict']}, exit {run['exit_code']}): "
        f"wall {wall:.0f} s; engine time "
        + ", ".join(f"{s} {busy[s]:.0f} s" for s in sides)
        + f"; floor (busier side) {floor:.0f} s; **wall / floor {wall / floor:.2f}×**; "
        f"no request in flight {wall - anything:.0f} s",
        "",
        "| gate | span s | "
        + " | ".join(f"{s} engine s" for s in sides)
        + " | both at once s | nothing in flight s | requests |",
        "|---|" + "---:|" * (len(sides) + 4),
    ]
    by_gate: dict[str, list[Request]] = defaultdict(list)
    for r in reqs:
        by_gate[r.gate].append(r)
    covered = 0.0
    for gate, rs in sorted(by_gate.items(), key=lambda kv: min(r.start_s for r in kv[1])):
        lo, hi = min(r.start_s for r in rs), max(r.end_s for r in rs)
        covered += hi - lo
        per = {s: [(r.start_s, r.end_s) for r in rs if r.side == s] for s in sides}
        both = intersect_s(per.get("baseline", []), per.get("candidate", []))
        idle = (hi - lo) - union_s(iv for v in per.values() for iv in v)
        cells = " | ".join(f"{union_s(per[s]):.1f}" for s in sides)
        out.append(f"| {gate} | {hi - lo:.1f} | {cells} | {both:.1f} | {idle:.1f} | {len(rs)} |")
    out.append(
        f"| (outside every gate's requests: preflight, judging, reports) | {wall - covered:.1f} "
        + "| " * (len(sides) + 3)
        + "|"
    )
    out += ["", "| kind of request | " + " | ".join(f"{s} engine s" for s in sides)
            + " | requests |", "|---|" + "---:|" * (len(sides) + 1)]  # fmt: skip
    kinds: dict[str, list[Request]] = defaultdict(list)
    for r in reqs:
        kinds[kind(r.probe)].append(r)
    for name, rs in sorted(kinds.items()):
        cells = " | ".join(
            f"{union_s((r.start_s, r.end_s) for r in rs if r.side == s):.1f}" for s in sides
        )
        out.append(f"| {name} | {cells} | {len(rs)} |")
    return "\n".join(out)


def measure(db: str, sources: Sequence[str]) -> list[str]:
    """Run the default gate once per source tree against two clean engines; the run ids."""
    from servegate.engine import start_engine

    ids = []
    with start_engine("clean") as baseline, start_engine("clean") as candidate:
        for src in sources:
            env = {**os.environ, "PYTHONPATH": str(Path(src).resolve())}
            load_before = os.getloadavg()[0]
            t0 = time.perf_counter()
            proc = subprocess.run(
                [sys.executable, "-m", "servegate", "gate", "--baseline", baseline.base_url,
                 "--candidate", candidate.base_url, "--db", db, "--quiet"],
                env=env, capture_output=True, text=True, check=False,
            )  # fmt: skip
            wall = time.perf_counter() - t0
            run, *_ = load(db, None)
            ids.append(str(run["id"]))
            print(
                f"{src}: exit {proc.returncode}, process wall {wall:.0f} s, load average "
                f"{load_before:.1f} → {os.getloadavg()[0]:.1f}, run {run['id']}",
                flush=True,
            )
    return ids


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", required=True, help="SQLite file or SQLAlchemy URL")
    parser.add_argument("--run", default=None, help="run id (default: the latest)")
    parser.add_argument("--measure", nargs="+", default=None, metavar="SRC")
    args = parser.parse_args()
    runs = [args.run] if args.measure is None else measure(args.db, args.measure)
    for run_id in runs:
        print(report(*load(args.db, run_id)), end="\n\n", flush=True)


if __name__ == "__main__":
    main()
