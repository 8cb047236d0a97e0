"""Judgement both ways: the full default `servegate gate` against each reference-engine variant.

Starts the clean baseline once, then one candidate at a time (benign kernel `flash-attn` three
times, `clean`, `mmap-off`, `drift`, `logit-scale`, `mixed-dtype`), runs the real command line
with every correctness gate, keeps each JSON report and prints the table of issue 7: argmax
flips and mean |Δlogprob| under teacher forcing on the reference texts, the perplexity shift ±
its standard error, cross-ΔNLL of divergent greedy answers, golden regressions beyond noise,
verdict and wall time.

    .venv/bin/python benchmarks/judgement_variants.py --out benchmarks/results/judgement
    .venv/bin/python benchmarks/judgement_variants.py --table benchmarks/results/judgement

`--stock` runs both sides on the stock llama-cpp-python server instead of the patched reference
engine (`bash scripts/setup.sh stock`); `--variants a,b` runs those only (one time each). The
table then says which route scored prompts on each side (echo as returned, echo shifted, none),
the alignment error before and after calibration, and the share of positions scored.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

RUNS = (
    ("clean", 1),
    ("flash-attn", 3),
    ("mmap-off", 1),
    ("drift", 1),
    ("logit-scale", 1),
    ("mixed-dtype", 1),
)


def _gate(baseline: str, candidate: str, out: Path, *extra: str) -> tuple[int, float]:
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "servegate", "gate", "--baseline", baseline,
         "--candidate", candidate, "--json", str(out), "--no-store", "--quiet", *extra],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if not out.exists():
        raise SystemExit(f"no report from {candidate}: exit {proc.returncode}\n{proc.stderr}")
    return proc.returncode, time.perf_counter() - t0


def run(
    out_dir: Path, runs: tuple[tuple[str, int], ...], *, stock: bool, extra: tuple[str, ...] = ()
) -> None:
    from servegate.engine import start_engine

    out_dir.mkdir(parents=True, exist_ok=True)
    with start_engine("clean", stock=stock) as baseline:
        for variant, times in runs:
            for i in range(times):
                with start_engine(variant, stock=stock) as candidate:
                    path = out_dir / f"{variant}-{i + 1}.json"
                    code, wall_s = _gate(baseline.base_url, candidate.base_url, path, *extra)
                report = json.loads(path.read_text())
                report["_bench"] = {"exit_code": code, "wall_s": round(wall_s, 1)}
                path.write_text(json.dumps(report, indent=1))
                print(row(variant, report), flush=True)


def _gate_of(report: dict[str, Any], name: str) -> dict[str, Any]:
    return next((g for g in report["gates"] if g["name"] == name), {"metrics": {}, "status": "-"})


def _num(value: Any, spec: str) -> str:
    return "-" if not isinstance(value, int | float) else format(value, spec)


def _route(numerics: dict[str, Any], side: str) -> str:
    """`route (as returned → calibrated)`, nats/token, from the numerics gate's evidence."""
    route = numerics.get("details", {}).get("perplexity", {}).get(f"{side}_route") or {}
    before = route.get("as_returned_nats", numerics["metrics"].get(f"{side}_echo_alignment_nats"))
    after = route.get("calibrated_nats")
    name = route.get("route", numerics["metrics"].get(f"{side}_scoring_route", "-"))
    return f"{name} ({_num(before, '.3f')} → {_num(after, '.4f')})"


def row(variant: str, report: dict[str, Any]) -> str:
    n = _gate_of(report, "numerics")["metrics"]
    g = _gate_of(report, "golden")
    shift = f"{_num(n.get('perplexity_shift_nats'), '+.4f')} ± " \
            f"{_num(n.get('perplexity_shift_stderr_nats'), '.4f')} " \
            f"(z {_num(n.get('perplexity_shift_z'), '+.1f')})"  # fmt: skip
    gates = ", ".join(f"{x['name']} {x['status']}" for x in report["gates"])
    routes = " / ".join(
        _route(_gate_of(report, "numerics"), side) for side in ("baseline", "candidate")
    )
    cells = [
        variant,
        routes,
        _num(n.get("perplexity_coverage"), ".0%"),
        _num(n.get("reference_argmax_flip_rate"), ".1%"),
        _num(n.get("reference_mean_abs_dlogprob_nats"), ".3f"),
        shift,
        _num(n.get("cross_nll_excess_mean_nats"), "+.2f"),
        f"{n.get('confident_flips', '-')} / {n.get('near_tie_flips', '-')}",
        f"{g['metrics'].get('regressed', '-')} ({g['metrics'].get('explained', 0)} explained, "
        f"{g['metrics'].get('within_noise', 0)} within noise)",
        f"{report['verdict'].upper()}, exit {report.get('exit_code', '-')} ({gates})",
        f"{report.get('_bench', {}).get('wall_s', report['duration_s'])} s",
    ]
    return "| " + " | ".join(cells) + " |"


HEADER = (
    "| candidate | scoring route, baseline / candidate (alignment nats/token before → after) "
    "| positions scored | argmax flips (ref. texts) | mean \\|Δlogprob\\| "
    "| ΔNLL ± s.e. (nats/token) | cross-ΔNLL | confident / near-tie flips "
    "| golden regressions beyond noise | verdict | time |\n"
    "|---|---|---|---|---|---|---|---|---|---|---|"
)


def table(out_dir: Path, runs: tuple[tuple[str, int], ...]) -> None:
    print(HEADER)
    for variant, times in runs:
        for i in range(times):
            path = out_dir / f"{variant}-{i + 1}.json"
            if path.exists():
                print(row(variant, json.loads(path.read_text())))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="run every variant, reports into this folder")
    parser.add_argument("--table", type=Path, help="print the table from a folder of reports")
    parser.add_argument("--stock", action="store_true", help="the stock llama-cpp-python server")
    parser.add_argument("--variants", help="comma-separated variants to run, once each")
    parser.add_argument("--gates", help="passed to servegate gate (default: every default gate)")
    args = parser.parse_args()
    runs = tuple((v, 1) for v in args.variants.split(",")) if args.variants else RUNS
    if args.out:
        print(HEADER, flush=True)
        extra = ("--gates", args.gates) if args.gates else ()
        run(args.out, runs, stock=args.stock, extra=extra)
    elif args.table:
        table(args.table, runs)
    else:
        parser.error("give --out or --table")


if __name__ == "__main__":
    main()
