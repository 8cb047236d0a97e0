"""One markdown row per `servegate gate` JSON report: exit, verdict, the run's seconds and each
gate's status, seconds and requests a side (baseline + candidate), with its largest parts where
the report has them. usage: gates.py REPORT.json ..."""

from __future__ import annotations

import json
import sys
from pathlib import Path


def cell(gate: dict[str, object]) -> str:
    time = gate.get("time") or {}
    assert isinstance(time, dict)
    if not time:
        return str(gate["status"])
    req = time.get("requests") or {}
    sides = "+".join(str(req.get(s, 0)) for s in ("baseline", "candidate"))
    return f"{gate['status']} {time['seconds']:.0f} s ({sides})"


names = ["startup", "numerics", "embeddings", "golden", "sampling", "context", "performance"]
print("| report | exit | verdict | run s | " + " | ".join(names) + " |")
print("|---|---|---|---|" + "---|" * len(names))
for arg in sys.argv[1:]:
    report = json.loads(Path(arg).read_text())
    gates = {g["name"]: g for g in report["gates"]}
    cells = [cell(gates[n]) if n in gates else "-" for n in names]
    print(
        f"| {Path(arg).stem} | {report['exit_code']} | {report['verdict']} "
        f"| {report['duration_s']:.0f} | " + " | ".join(cells) + " |"
    )
