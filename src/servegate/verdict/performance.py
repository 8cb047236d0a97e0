"""The Performance Report table: startup, latency, throughput, errors and correctness under load.

Separate from the Correctness Report and built the same way: each row is a gate's own check
(never measured or judged again here), its status the check's outcome through the one mapping in
judgement.py, and its definition the one the load generator prints beside the same number. The
ready time comes from the startup gate, everything else from the performance gate.
"""

from __future__ import annotations

from collections.abc import Sequence

from servegate.load.correctness import DEFINITIONS as CHECK_DEFINITIONS
from servegate.load.metrics import DEFINITIONS as METRIC_DEFINITIONS
from servegate.verdict.judgement import STATUS_OF
from servegate.verdict.model import GateResult, PerformanceRow, Status

ROWS: dict[str, str] = {
    "ready time": "latency of a real 1-token completion after start-up (not /health), each side",
    "TTFT P95": METRIC_DEFINITIONS["ttft_ms"],
    "TPOT P95": METRIC_DEFINITIONS["tpot_ms"],
    "E2EL P95": METRIC_DEFINITIONS["e2el_ms"],
    "throughput": METRIC_DEFINITIONS["output_tokens_per_s"] + ", per load block; the median "
    "block is compared",
    "error rate": METRIC_DEFINITIONS["error_rate"],
    "answers checked under load": "answers that fail a load check: "
    + "; ".join(f"{k}: {CHECK_DEFINITIONS[k]}" for k in ("degenerate", "empty", "error_body")),
    "agreement under load": "share of temperature-0 prompts whose answer under concurrent load "
    "differs from the same prompt answered alone; the baseline's share is the noise floor",
}


def performance_table(results: Sequence[GateResult]) -> tuple[PerformanceRow, ...]:
    """One row per performance metric of the gates that ran, in ROWS order; none without a
    performance gate that ran."""
    ran = [g for g in results if g.status is not Status.SKIP]
    if not any(g.name == "performance" for g in ran):
        return ()
    rows = []
    for name, definition in ROWS.items():
        for gate in ran:
            for c in gate.checks:
                if c.row == name:
                    rows.append(
                        PerformanceRow(
                            metric=name,
                            gate=gate.name,
                            baseline=c.baseline,
                            candidate=c.candidate,
                            ratio=c.ratio,
                            interval=c.interval,
                            threshold=c.limit,
                            status=STATUS_OF[c.outcome],
                            definition=definition,
                        )
                    )
    return tuple(rows)
