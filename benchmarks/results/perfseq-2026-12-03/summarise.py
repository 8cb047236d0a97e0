"""One markdown row per run of perfseq.sh: verdict, looks, blocks a side, TTFT / E2EL /
throughput (outcome, ratio, interval) and wall seconds. usage: summarise.py OUT_DIR"""

from __future__ import annotations

import json
import sys
from pathlib import Path

out = Path(sys.argv[1])
print(
    "| run | code | exit | verdict | looks | blocks a side | TTFT P95 | E2EL P95 | throughput "
    "| gate s | wall s | load |"
)
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
for line in (out / "runs.txt").read_text().splitlines():
    name, *fields = line.split()
    kv = dict(f.split("=", 1) for f in fields)
    kind, code, _ = name.split("-", 2)
    report = json.loads((out / f"{name}.json").read_text())
    [gate] = report["gates"]
    checks = {c["name"]: c for c in gate["checks"]}
    seq = gate["details"].get("sequential")
    looks = len(seq["looks"]) if seq else 1
    blocks = max(b["block"] for b in gate["details"]["blocks"]) + 1

    def cell(name: str, checks: dict[str, dict[str, str]] = checks) -> str:
        c = checks[name]
        return f"{c['outcome']} {c['ratio']} {c['interval']}".replace("|", "/")

    print(
        f"| {name} | {code} | {kv['rc']} | {report['verdict']} | {looks} | {blocks} "
        f"| {cell('ttft_ms')} | {cell('e2el_ms')} | {cell('output_tokens_per_s')} "
        f"| {(gate.get('time') or {}).get('seconds', 0):.0f} | {float(kv['wall']):.0f} "
        f"| {kv['load']} |"
    )
