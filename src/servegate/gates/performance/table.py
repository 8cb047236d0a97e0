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
from servegate.load.server_metrics import GAUGES, ServerMetrics
from servegate.load.sweep import ATTAINMENT
from servegate.load.sweep import DEFINITION as SWEEP_DEFINITION
from servegate.verdict.judgement import STATUS_OF
from servegate.verdict.model import EvidenceRow, GateResult, PerformanceRow, Status

CAPACITY_ROW = "max concurrency under SLO"
NO_SLO = "not measured: no SLO set (performance.slo or --slo)"
ROWS: dict[str, str] = {
    "ready time": "latency of a real 1-token completion after start-up (not /health), each side",
    "TTFT P95": METRIC_DEFINITIONS["ttft_ms"],
    "TPOT P95": METRIC_DEFINITIONS["tpot_ms"],
    "E2EL P95": METRIC_DEFINITIONS["e2el_ms"],
    "throughput": METRIC_DEFINITIONS["output_tokens_per_s"] + ", per load block; the median "
    "block is compared",
    CAPACITY_ROW: SWEEP_DEFINITION.format(share=ATTAINMENT)
    + ", here each of the ascending concurrencies of performance.capacity_concurrency, "
    "performance.capacity_requests requests a step and side; a side stops climbing after its "
    "first missed step",
    "error rate": METRIC_DEFINITIONS["error_rate"],
    "answers checked under load": "answers that fail a load check: "
    + "; ".join(f"{k}: {CHECK_DEFINITIONS[k]}" for k in ("degenerate", "empty", "error_body")),
    "agreement under load": "share of temperature-0 prompts whose answer under concurrent load "
    "differs from the same prompt answered alone; the baseline's share is the noise floor (where "
    "the blocks ran below the asked concurrency: the answers given whole at the asked one while "
    "another request was in flight)",
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


SERVER_NOTE = (
    "; scraped from the server's Prometheus /metrics during the load blocks (evidence, not judged)"
)


def _server(gate: GateResult, side: str) -> ServerMetrics | None:
    found = gate.details.get("server_metrics", {}).get(side)
    return None if found is None else ServerMetrics.model_validate(found)


def _gauge_cell(server: ServerMetrics | None, key: str) -> str:
    if server is None:
        return "not asked for"
    if not server.measured:
        return f"not measured: {server.reason}"
    g = next((g for g in server.gauges if g.key == key), None)
    if g is None:
        return "not measured: the server does not export it"
    return f"mean {g.mean:.3g}, max {g.max:.3g} ({g.source}, {g.samples} scrapes)"


def performance_evidence(results: Sequence[GateResult]) -> tuple[EvidenceRow, ...]:
    """What the performance gate saw but did not judge: the capacity row when no SLO was set
    (saying so), and the server's own gauges under load, per side — one row per gauge when
    either side exported one, else one row saying why neither was measured."""
    rows: list[EvidenceRow] = []
    for gate in results:
        if gate.name != "performance" or gate.status is Status.SKIP:
            continue
        if gate.details.get("capacity", {}).get("not_measured") == NO_SLO:
            # Opt-in, so no check: an unset SLO makes no run inconclusive, --strict included.
            rows.append(
                EvidenceRow(
                    metric=CAPACITY_ROW,
                    gate=gate.name,
                    baseline=NO_SLO,
                    candidate=NO_SLO,
                    definition=ROWS[CAPACITY_ROW],
                )
            )
        b, c = _server(gate, "baseline"), _server(gate, "candidate")
        if b is None and c is None:
            continue
        if not any(s is not None and s.measured for s in (b, c)):
            rows.append(
                EvidenceRow(
                    metric="server metrics",
                    gate=gate.name,
                    baseline=_gauge_cell(b, ""),
                    candidate=_gauge_cell(c, ""),
                    definition="KV-cache usage and requests running and waiting" + SERVER_NOTE,
                )
            )
            continue
        rows += [
            EvidenceRow(
                metric=f"server {g.key.replace('_', ' ')}",
                gate=gate.name,
                baseline=_gauge_cell(b, g.key),
                candidate=_gauge_cell(c, g.key),
                definition=g.definition + SERVER_NOTE,
            )
            for g in GAUGES
        ]
    return tuple(rows)
