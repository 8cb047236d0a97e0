"""The difference between two JSON reports of the same judgement, minus what differs by run:
ids, timestamps, wall and latency timings, the OS-chosen ports in URLs and reproducers.

    python benchmarks/report_diff.py BEFORE.json AFTER.json      # exit 0: same verdict and numbers

Used for issue 25 (a restructuring with no change of behaviour): the judgement variants on the
reference engine before and after, compared gate by gate, check by check, number by number.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

# Keys whose values are timings or identities of one run, not judgements.
DROP = re.compile(
    r"(^|_)(ms|s|ns|seconds|at|id|run_id|duration|elapsed|latency|latencies|wall|time|pid"
    r"|started|finished|attempt|log_path|command|_bench)$|^(time|environment|launch|host)$"
    r"|latency|_ms_|ttft|tpot|e2el|^cancel_"  # timings, and what a cut at a time depends on
)
PORT = re.compile(r"(127\.0\.0\.1|localhost):\d+")
NUMBER_IN_MS = re.compile(r"\d+(\.\d+)? ?(ms|s)\b")


def normalise(value: Any, key: str = "") -> Any:
    if isinstance(value, dict):
        return {k: normalise(v, k) for k, v in sorted(value.items()) if not DROP.search(k)}
    if isinstance(value, list):
        return [normalise(v) for v in value]
    if isinstance(value, str):
        return NUMBER_IN_MS.sub("<t>", PORT.sub("<host>", value))
    return value


def diff(a: Any, b: Any, path: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b:
                out.append(f"{path}/{k}: only in {'after' if k in b else 'before'}")
            else:
                out += diff(a[k], b[k], f"{path}/{k}")
        return out
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{path}: {len(a)} items before, {len(b)} after"]
        return [line for i, (x, y) in enumerate(zip(a, b, strict=True))
                for line in diff(x, y, f"{path}[{i}]")]  # fmt: skip
    return [] if a == b else [f"{path}: {a!r} -> {b!r}"]


def main() -> int:
    before, after = (normalise(json.loads(Path(p).read_text())) for p in sys.argv[1:3])
    lines = diff(before, after)
    print("\n".join(lines) if lines else "no difference")
    return 1 if lines else 0


if __name__ == "__main__":
    raise SystemExit(main())
