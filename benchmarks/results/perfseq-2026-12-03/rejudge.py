"""The new first look on stored performance reports: each report's block P95s (TTFT, E2EL) judged
by the exact interval at the level its look would get, beside the verdict the report gave.

No engine runs: the blocks are the ones stored (details.blocks). Throughput is not stored per
block, so it is left out. usage: rejudge.py REPORT.json..."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from servegate.stats.sequential import look_levels
from servegate.stats.shift_interval import ratio_interval

BAND = 1.2
print("| report | blocks a side | metric | before | after: interval (look 1) | after |")
print("|---|---|---|---|---|---|")
for path in map(Path, sys.argv[1:]):
    report = json.loads(path.read_text())
    gates = [g for g in report.get("gates", []) if g["name"] == "performance"]
    if not gates or "blocks" not in gates[0].get("details", {}):
        continue
    gate = gates[0]
    checks = {c["name"]: c for c in gate["checks"]}
    blocks = gate["details"]["blocks"]
    for metric in ("ttft", "e2el"):
        side = {
            s: [b[f"{metric}_p95_ms"] for b in blocks if b["side"] == s and b[f"{metric}_p95_ms"]]
            for s in ("baseline", "candidate")
        }
        n = min(len(side["baseline"]), len(side["candidate"]))
        if n < 2:
            continue
        # The first look of a default design from this many blocks up to 12.
        plan = tuple(range(n, 13, 2)) if n < 12 else (n,)
        plan = plan if plan[-1] == max(n, 12) else (*plan, max(n, 12))
        level = look_levels(0.05, plan)[0].level
        ci = ratio_interval(side["baseline"], side["candidate"], level)
        if ci.bounded and ci.low > BAND:
            after = "fail"
        elif ci.bounded and ci.high <= BAND:
            after = "pass"
        else:
            after = "undecided: more blocks"
        before = checks[f"{metric}_ms"]
        print(
            f"| {path.parent.name}/{path.name} | {n} | {metric.upper()} P95 "
            f"| {before['outcome']} {before['ratio']} {before['interval']} "
            f"| {ci.estimate:.2f}× {ci.low:.2f}–{ci.high:.2f}× | {after} |"
        )
