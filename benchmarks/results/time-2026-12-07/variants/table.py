"""The before/after table of the judgement variants: per report, the verdict and the judgement
numbers (`benchmarks/judgement_variants.py`'s row), then each gate's span in seconds and its
timed requests a side, read from the store the same way for both trees (`time_to_verdict.load`:
the older tree's reports carry no per-gate time).

usage (from the repository root, the stores gunzipped):
    .venv/bin/python benchmarks/results/time-2026-12-07/variants/table.py DIR
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # benchmarks/
from judgement_variants import HEADER, row
from time_to_verdict import load

GATES = ("startup", "numerics", "golden", "context")
VARIANTS = ("clean", "flash-attn", "logit-scale", "mixed")
TREES = ("before", "after", "complete")  # complete: after, with --complete


def walls(out: Path) -> dict[str, str]:
    """NAME-VARIANT → the run's wall seconds from runs.txt."""
    got = {}
    for line in (out / "runs.txt").read_text().splitlines():
        name, _rc, wall, *_ = line.split()
        got[name] = f"{float(wall.removeprefix('wall=')):.0f}"
    return got


def gate_cells(
    db: Path, run_id: str, statuses: dict[str, str], gates: tuple[str, ...] = GATES
) -> list[str]:
    _run, requests, _offset = load(str(db), run_id)
    spans: dict[str, list[float]] = defaultdict(list)
    sides: dict[str, dict[str, int]] = defaultdict(lambda: {"baseline": 0, "candidate": 0})
    for r in requests:
        spans[r.gate] += [r.start_s, r.end_s]
        sides[r.gate][r.side] = sides[r.gate].get(r.side, 0) + 1
    cells = []
    for gate in gates:
        status = statuses.get(gate, "-")
        if gate not in spans:
            cells.append(status if status != "-" else "not run")
            continue
        s = sides[gate]
        cells.append(
            f"{status} {max(spans[gate]) - min(spans[gate]):.0f} s "
            f"({s['baseline']}+{s['candidate']})"
        )
    return cells


def main() -> None:
    out = Path(sys.argv[1])
    wall = walls(out)
    print("| candidate | tree | exit | verdict | run s | " + " | ".join(GATES) + " |")
    print("|---|---|---|---|---|" + "---|" * len(GATES))
    judged = []
    for variant in VARIANTS:
        for tree in TREES:
            path = out / f"{tree}-{variant}.json"
            if not path.exists():
                continue
            report = json.loads(path.read_text())
            statuses = {g["name"]: g["status"] for g in report["gates"]}
            cells = gate_cells(out / f"{tree}.db", report["run_id"], statuses)
            print(
                f"| {variant} | {tree} | {report.get('exit_code', '-')} | {report['verdict']} "
                f"| {wall.get(f'{tree}-{variant}', '-')} | " + " | ".join(cells) + " |"
            )
            judged.append(row(f"{variant} ({tree})", report))
    print()
    print(HEADER)
    print("\n".join(judged))


if __name__ == "__main__":
    main()
