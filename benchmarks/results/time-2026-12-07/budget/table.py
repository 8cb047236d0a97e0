"""The rows of RESULTS-time.md's `--budget` tables, from the reports in a folder.

    .venv/bin/python benchmarks/results/time-2026-12-07/budget/table.py DIR

Per run: exit, verdict, seconds; per gate its seconds, requests (baseline + candidate) and the
share of its scalable work the budget gave it; then what the judgement rests on: numerics'
perplexity shift (z, tokens) and flips, sampling's failed and not-measured checks."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

GATES = ("startup", "numerics", "golden", "sampling", "context", "performance")


def _cell(g: dict[str, Any] | None) -> str:
    if g is None:
        return ""
    t = g.get("time") or {}
    if g["status"] == "skip":
        return "skip" if "failed fast" not in g["summary"] else "not run"
    req = t.get("requests", {})
    share = t.get("share")
    mark = "" if share in (None, 1.0) else f" ×{share:.2f}"
    both = f"{req.get('baseline', 0)}+{req.get('candidate', 0)}"
    status = "" if g["status"] == "pass" else f"{g['status']} "
    return f"{status}{t.get('seconds', 0):.0f}{mark} ({both})"


def _judgement(gates: dict[str, dict[str, Any]]) -> str:
    out = []
    if n := gates.get("numerics"):
        m = n.get("metrics", {})
        checks = {c["name"]: c for c in n.get("checks", [])}
        if "perplexity_shift_nats" in m:
            z = m.get("perplexity_shift_z", 0)
            tokens = m.get("perplexity_tokens")
            out.append(f"ΔNLL {m['perplexity_shift_nats']:+.4f} z {z:+.1f} ({tokens} tok)")
        if "confident_flips" in checks:
            out.append(f"flips {checks['confident_flips'].get('candidate')}")
    if s := gates.get("sampling"):
        failed = [c["name"] for c in s.get("checks", []) if c["outcome"] == "fail"]
        if failed:
            out.append("sampling failed: " + ", ".join(failed))
        if s.get("not_measured"):
            out.append(f"sampling not measured: {len(s['not_measured'])}")
    return "; ".join(out)


def main() -> None:
    folder = Path(sys.argv[1])
    print("| run | exit | verdict | run s | " + " | ".join(GATES) + " | judgement |")
    print("|---" * (len(GATES) + 5) + "|")
    for path in sorted(folder.glob("*.json")):
        r = json.loads(path.read_text())
        gates = {g["name"]: g for g in r["gates"]}
        cells = " | ".join(_cell(gates.get(name)) for name in GATES)
        print(
            f"| {path.stem} | {r['exit_code']} | {r['verdict']} | {r['duration_s']:.0f} | "
            f"{cells} | {_judgement(gates)} |"
        )


if __name__ == "__main__":
    main()
