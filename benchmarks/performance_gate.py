"""The performance gate on the reference engine: clean vs clean, time to verdict, and the clean
engine's own disagreement under load (what `tolerance.load_mismatch_rate` sits above).

`clean` starts two clean reference engines (`--same`: one, reached as 127.0.0.1 and as
localhost) and runs the real command line
`servegate gate --gates performance` against them RUNS times in a row, with the default settings;
it keeps every JSON report and prints one row per run: exit code, verdict, wall time (process
start to exit: the time to verdict), each P95 ratio with its interval, the throughput
ratio and both sides' agreement under load.

`--replica` starts a third clean engine and passes it as `--baseline-replica`: it runs the same
interleaved blocks and its deviation from the baseline is the A/A floor of every performance
limit (`performance_aa_k`). `--fault NAME` serves the candidate behind that engine fault (e.g.
`slow`), so a run shows what a real regression looks like with the same floor. Each row also
gives the 1-minute load average at the start and end of the run.

`mismatch` measures the clean engine against itself under load, through the gate's own
`collect`: every prompt of the first block is also answered alone, and the share of answers that
differ is the baseline's floor. It runs `--repeats` collections of `--prompts` prompts each.

    .venv/bin/python benchmarks/performance_gate.py clean --out benchmarks/results/performance
    .venv/bin/python benchmarks/performance_gate.py clean --replica --out benchmarks/results/perf-aa
    .venv/bin/python benchmarks/performance_gate.py clean --replica --fault slow --runs 1 \
        --out benchmarks/results/perf-aa
    .venv/bin/python benchmarks/performance_gate.py mismatch --prompts 20 --repeats 2
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

RUNS = 3
ROWS = {  # Performance Report row: metric
    "TTFT P95": "ttft_ms",
    "TPOT P95": "tpot_ms",
    "E2EL P95": "e2el_ms",
    "throughput": "output_tokens_per_s",
}


def _gate(
    baseline: str, candidate: str, out: Path, replica: str | None = None
) -> tuple[int, float]:
    t0 = time.perf_counter()
    extra = [] if replica is None else ["--baseline-replica", replica]
    proc = subprocess.run(
        [sys.executable, "-m", "servegate", "gate", "--baseline", baseline,
         "--candidate", candidate, *extra, "--gates", "performance", "--json", str(out),
         "--no-store", "--quiet"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if not out.exists():
        raise SystemExit(f"no report: exit {proc.returncode}\n{proc.stderr}")
    return proc.returncode, time.perf_counter() - t0


def row(run: int, report: dict[str, Any]) -> str:
    rows = {r["metric"]: r for r in report["performance"]}
    cells = [str(run), f"{report['verdict'].upper()} (exit {report['_bench']['exit_code']})"]
    cells.append(f"{report['_bench']['wall_s']:.0f} s")
    cells.append("{:.1f}–{:.1f}".format(*report["_bench"]["load_average"]))
    floors = next(
        (g["details"].get("aa_floor", {}) for g in report["gates"] if g["name"] == "performance"),
        {},
    )
    for name, metric in ROWS.items():
        r = rows.get(name)
        floor = floors.get(metric) or {}
        aa = "" if floor.get("ratio") is None else f" (A/A {floor['ratio']:.2f}×)"
        cells.append("-" if r is None else f"{r['ratio']} [{r['interval']}] {r['status']}{aa}")
    agree = rows.get("agreement under load")
    cells.append("-" if agree is None else f"{agree['baseline']} / {agree['candidate']}")
    return "| " + " | ".join(cells) + " |"


HEADER = (
    "| run | verdict | time to verdict | load avg (1 min) | TTFT P95 ratio [CI] "
    "| TPOT P95 ratio [CI] | E2EL P95 ratio [CI] | throughput ratio [CI] "
    "| differ under load: baseline / candidate |\n"
    "|---|---|---|---|---|---|---|---|---|"
)


def clean(
    out_dir: Path,
    runs: int,
    *,
    same: bool = False,
    replica: bool = False,
    fault: str | None = None,
) -> None:
    """Two clean engines; with `same`, one engine reached as 127.0.0.1 and as localhost (an A/A
    of one process: what is left is the client's and the method's own noise); with `replica`, a
    third clean engine as the baseline's replica; with `fault`, the candidate behind it."""
    from servegate.engine import start_engine

    out_dir.mkdir(parents=True, exist_ok=True)
    print(HEADER, flush=True)
    with start_engine("clean") as baseline, contextlib.ExitStack() as stack:
        if same:
            candidate_url = baseline.base_url.replace("127.0.0.1", "localhost")
        else:
            candidate_url = stack.enter_context(start_engine("clean", fault=fault)).base_url
        replica_url = stack.enter_context(start_engine("clean")).base_url if replica else None
        for run in range(1, runs + 1):
            name = "same-process" if same else f"{fault or 'clean'}-vs-clean"
            name += "-replica" if replica else ""
            path = out_dir / f"{name}-{run}.json"
            load_before = os.getloadavg()[0]
            code, wall_s = _gate(baseline.base_url, candidate_url, path, replica_url)
            report = json.loads(path.read_text())
            report["_bench"] = {
                "exit_code": code,
                "wall_s": round(wall_s, 1),
                "load_average": [load_before, os.getloadavg()[0]],
            }
            path.write_text(json.dumps(report, indent=1))
            print(row(run, report), flush=True)


async def _mismatch(url: str, prompts: int, seed: int) -> tuple[int, int, list[int]]:
    from servegate.config.models import EndpointConfig, GateConfig, PerformanceConfig
    from servegate.endpoints.http import OpenAIEndpoint
    from servegate.gates import performance
    from servegate.gates.pair import EndpointPair
    from servegate.gates.performance.plan import in_flight_counts

    settings = PerformanceConfig(
        blocks=1, requests_per_block=prompts, isolated_prompts=prompts, seed=seed
    )
    cfg = GateConfig(
        baseline=EndpointConfig(url=url), candidate=EndpointConfig(url=url), performance=settings
    )
    base, cand = OpenAIEndpoint("baseline", url), OpenAIEndpoint("candidate", url)
    try:
        ev = await performance.collect(EndpointPair(base, cand), cfg)
    finally:
        await base.aclose()
        await cand.aclose()
    [step] = ev.side_blocks("baseline")
    loaded = {x.index: x for x in step.exchanges}
    flying = in_flight_counts(step.exchanges)
    compared, differ, where = 0, 0, []
    for alone in ev.alone["baseline"]:
        x = loaded.get(alone.index)
        if x is None or not (x.completion.ok and alone.completion.ok):
            continue
        compared += 1
        if x.completion.text != alone.completion.text:
            differ += 1
            where.append(flying.get(x.index, 1))
    return compared, differ, where


def mismatch(prompts: int, repeats: int) -> None:
    from servegate.engine import start_engine

    print("| repeat (seed) | compared | differ under load | share | in flight if differing |")
    print("|---|---|---|---|---|")
    total_c = total_d = 0
    with start_engine("clean") as engine:
        for seed in range(repeats):
            compared, differ, where = asyncio.run(_mismatch(engine.base_url, prompts, seed))
            total_c, total_d = total_c + compared, total_d + differ
            share = differ / compared if compared else float("nan")
            print(f"| {seed + 1} ({seed}) | {compared} | {differ} | {share:.2f} | {where} |")
    if total_c:
        print(f"| all | {total_c} | {total_d} | {total_d / total_c:.2f} | |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    c = sub.add_parser("clean", help="clean vs clean, the real command line, RUNS times")
    c.add_argument("--out", type=Path, required=True)
    c.add_argument("--runs", type=int, default=RUNS)
    c.add_argument("--same", action="store_true", help="one engine as both sides (A/A)")
    c.add_argument("--replica", action="store_true", help="a third engine: --baseline-replica")
    c.add_argument("--fault", default=None, help="serve the candidate behind this engine fault")
    m = sub.add_parser("mismatch", help="the clean engine's own disagreement under load")
    m.add_argument("--prompts", type=int, default=20)
    m.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    if args.command == "clean":
        clean(args.out, args.runs, same=args.same, replica=args.replica, fault=args.fault)
    else:
        mismatch(args.prompts, args.repeats)


if __name__ == "__main__":
    main()
