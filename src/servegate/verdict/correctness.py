"""The Correctness Report table: the few numbers a reviewer reads first, with their thresholds.

Rows are derived from the gates' metrics (never measured again here), so the table and the gates
cannot disagree; a row whose gate did not run is left out, and a row with nothing measured is
inconclusive.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from servegate.config.models import Policy
from servegate.verdict.model import CorrectnessRow, GateResult, MetricValue, Status


def _pct(value: Any) -> str:
    return "-" if not isinstance(value, int | float) else f"{value:.0%}"


def _num(value: MetricValue, fmt: str = ".4f") -> str:
    return "-" if not isinstance(value, int | float) else format(value, fmt)


def _rate_row(
    metric: str, rates: Mapping[str, Any] | None, threshold: str, gate: GateResult
) -> CorrectnessRow:
    if not rates or not rates.get("n"):
        return CorrectnessRow(
            metric=metric, gate=gate.name, baseline="-", candidate="-", threshold=threshold,
            status=Status.INCONCLUSIVE,
        )  # fmt: skip
    regressions = int(rates.get("regressions") or 0)
    return CorrectnessRow(
        metric=metric,
        gate=gate.name,
        baseline=f"{_pct(rates['baseline_rate'])} {rates['baseline_ci']}",
        candidate=f"{_pct(rates['candidate_rate'])} {rates['candidate_ci']}",
        threshold=f"{threshold} (McNemar p={rates['mcnemar_p_candidate_worse']})",
        status=Status.FAIL if regressions else Status.PASS,
    )


def _golden_rows(g: GateResult, policy: Policy) -> list[CorrectnessRow]:
    cats = g.details.get("categories", {})
    degenerate = sum(1 for f in g.findings if f.category in ("degeneration", "empty_output"))
    return [
        _rate_row(
            "deterministic pass rate", cats.get("canary"),
            f"≥ {policy.canary_pass_rate:.0%} of baseline passes", g,
        ),
        _rate_row("structured parse rate", cats.get("structured"), "not lower than baseline", g),
        CorrectnessRow(
            metric="severe degeneration",
            gate=g.name,
            baseline=str(g.metrics.get("baseline_severe_degeneration", "-")),
            candidate=f"{degenerate} probe(s)",
            threshold=f"≤ {policy.severe_degeneration_max} new",
            status=Status.FAIL if degenerate > policy.severe_degeneration_max else Status.PASS,
        ),
    ]  # fmt: skip


def _numerics_row(g: GateResult) -> CorrectnessRow:
    m = g.metrics
    drift = m.get("mean_abs_dlogprob_nats")
    flips = m.get("confident_flips")
    return CorrectnessRow(
        metric="numerical drift",
        gate=g.name,
        baseline=f"A/A {_num(m.get('aa_mean_abs_dlogprob_nats'))} nats",
        candidate=f"{_num(drift)} nats, {flips if flips is not None else '-'} confident flips",
        threshold=f"≤ {_num(m.get('dlogprob_limit_nats'))} nats (k × floor + ε)",
        status=g.status if g.status is not Status.SKIP else Status.INCONCLUSIVE,
    )


def _context_row(g: GateResult) -> CorrectnessRow:
    m = g.metrics
    b, c = m.get("needle_recall_baseline"), m.get("needle_recall_candidate")
    measured = isinstance(b, int | float) and isinstance(c, int | float)
    worse = measured and float(c) < float(b)  # type: ignore[arg-type]
    return CorrectnessRow(
        metric="long-context recall",
        gate=g.name,
        baseline=_pct(b),
        candidate=_pct(c),
        threshold="not lower than baseline",
        status=Status.FAIL if worse else (Status.PASS if measured else Status.INCONCLUSIVE),
    )


def correctness_table(results: Sequence[GateResult], policy: Policy) -> tuple[CorrectnessRow, ...]:
    """One row per headline metric of the gates that ran."""
    rows: list[CorrectnessRow] = []
    ran = {g.name: g for g in results if g.status is not Status.SKIP}
    if "numerics" in ran:
        rows.append(_numerics_row(ran["numerics"]))
    if "golden" in ran:
        rows += _golden_rows(ran["golden"], policy)
    if "context" in ran:
        rows.append(_context_row(ran["context"]))
    hangs = sum(1 for g in results for f in g.findings if f.category in ("timeout", "stalled"))
    rows.append(
        CorrectnessRow(
            metric="hangs",
            gate="all",
            baseline="-",
            candidate=str(hangs),
            threshold=f"≤ {policy.hangs_max}",
            status=Status.FAIL if hangs > policy.hangs_max else Status.PASS,
        )
    )
    return tuple(rows)
