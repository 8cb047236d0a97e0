"""The before/after tables of run.sh: per report the verdict, each gate's span in seconds and
its timed requests a side, read from each tree's store the same way (the variants table of
2026-12-07, `gate_cells`); the judgement numbers of the correctness runs
(`judgement_variants.row`); and the performance runs' checks (outcome, ratio, interval).

usage (from the repository root, the stores gunzipped: `gunzip -k DIR/*.db.gz`):
    .venv/bin/python benchmarks/results/time-2026-12-08/vllm-variants/table.py DIR
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "time-2026-12-07" / "variants"))
sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # benchmarks/
from judgement_variants import HEADER, row
from table import gate_cells

CORRECTNESS = ("aa", "utf8", "fp32", "mixed")
PERFORMANCE = ("aa-perf", "slow", "batch-corrupt")
GATES = ("startup", "numerics", "golden", "context", "performance")
CHECKS = ("ttft_ms", "tpot_ms", "e2el_ms", "output_tokens_per_s", "early_divergence")


def walls(out: Path) -> dict[str, str]:
    """TREE-NAME → the run's wall seconds from runs.txt (its server-start lines left out)."""
    got = {}
    for line in (out / "runs.txt").read_text().splitlines():
        name, rc, *rest = line.split()
        if rc.startswith("rc="):
            got[name] = f"{float(rest[0].removeprefix('wall=')):.0f}"
    return got


def reports(out: Path, names: tuple[str, ...]) -> list[tuple[str, str, dict[str, object]]]:
    got = []
    for name in names:
        for tree in ("before", "after", "complete"):
            path = out / f"{tree}-{name}.json"
            if path.exists():
                got.append((name, tree, json.loads(path.read_text())))
    return got


def check_cell(gate: dict[str, object], name: str) -> str:
    for c in gate["checks"]:  # type: ignore[union-attr]
        if c["name"] == name:
            if c.get("ratio") in (None, "-"):  # a count, not a ratio: both sides' own words
                cand, base = (str(c.get(side)).split(" (")[0] for side in ("candidate", "baseline"))
                text = f"{c['outcome']} {cand} (baseline {base})"
            else:
                text = f"{c['outcome']} {c['ratio']} {c.get('interval') or ''}"
            return text.replace("|", "/").strip()
    return "-"


def main() -> None:
    out = Path(sys.argv[1])
    wall = walls(out)
    print("| candidate | tree | exit | verdict | run s | " + " | ".join(GATES) + " |")
    print("|---|---|---|---|---|" + "---|" * len(GATES))
    everything = reports(out, (*CORRECTNESS, "hang-long", *PERFORMANCE))
    for name, tree, report in everything:
        gates = report["gates"]
        statuses = {g["name"]: g["status"] for g in gates}  # type: ignore[attr-defined]
        cells = gate_cells(out / f"{tree}.db", str(report["run_id"]), statuses, GATES)
        print(
            f"| {name} | {tree} | {report.get('exit_code', '-')} | {report['verdict']} "
            f"| {wall.get(f'{tree}-{name}', '-')} | " + " | ".join(cells) + " |"
        )
    print()
    print(HEADER)
    for name, tree, report in reports(out, CORRECTNESS):
        print(row(f"{name} ({tree})", report))
    print()
    print("| candidate | tree | " + " | ".join(CHECKS) + " | gate s |")
    print("|---|---|" + "---|" * (len(CHECKS) + 1))
    for name, tree, report in reports(out, PERFORMANCE):
        [gate] = report["gates"]  # type: ignore[misc]
        cells = [check_cell(gate, c) for c in CHECKS]
        seconds = (gate.get("time") or {}).get("seconds")
        print(
            f"| {name} | {tree} | "
            + " | ".join(cells)
            + f" | {'-' if seconds is None else f'{seconds:.0f}'} |"
        )


if __name__ == "__main__":
    main()
