"""One row per run of run.sh: exit, wall, requests a block, blocks a side, each check's outcome
with its ratio and interval (early divergence: the candidate's and the baseline's counts).

usage: .venv/bin/python benchmarks/results/time-2026-12-08/budget-perf/table.py DIR
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

CHECKS = ("ttft_ms", "tpot_ms", "e2el_ms", "output_tokens_per_s", "early_divergence")


def cell(check: dict[str, str]) -> str:
    if check.get("ratio") in (None, "-"):
        cand, base = (str(check.get(s)).split(" (")[0] for s in ("candidate", "baseline"))
        return f"{check['outcome']} {cand} / {base}"
    return f"{check['outcome']} {check['ratio']} {check.get('interval') or ''}".strip()


def main() -> None:
    out = Path(sys.argv[1])
    print("| run | exit | wall s | requests a block | blocks a side | " + " | ".join(CHECKS) + " |")
    print("|---|---|---|---|---|" + "---|" * len(CHECKS))
    for line in (out / "runs.txt").read_text().splitlines():
        name, rc, wall, *_ = line.split()
        [gate] = json.loads((out / f"{name}.json").read_text())["gates"]
        checks = {c["name"]: c for c in gate["checks"]}
        blocks = gate["details"]["blocks"]
        sides = {b.get("side") for b in blocks}
        per_block = max(int(b["sent"]) for b in blocks) if blocks else "-"
        cells = [cell(checks[c]).replace("|", "/") if c in checks else "-" for c in CHECKS]
        print(
            f"| {name} | {rc.removeprefix('rc=')} | {float(wall.removeprefix('wall=')):.0f} "
            f"| {per_block} | {len(blocks) // max(1, len(sides))} | " + " | ".join(cells) + " |"
        )


if __name__ == "__main__":
    main()
