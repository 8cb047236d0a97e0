"""Golden's paired pass rates per category: each probe as both sides answered it, with Wilson
intervals and the exact McNemar p that the candidate is worse; failures within the baseline's
noise counted apart from regressions beyond it."""

from __future__ import annotations

from collections.abc import Sequence

from servegate.gates.golden.probe import Judged, ProbeStatus
from servegate.stats import PairedCounts, mcnemar_exact, wilson_interval
from servegate.verdict.model import MetricValue

# Categories whose probes check machine-readable output: the "structured parse rate".
STRUCTURED_CATEGORIES = frozenset({"json", "tools"})


def _paired(judged: Sequence[Judged]) -> PairedCounts:
    """Pass/fail pairs over probes judged on both sides, each side as it actually answered: a
    candidate failure judged within the baseline's noise is a failure here (counted apart by
    `_within_noise`), never a pass."""
    usable = [j for j in judged if j.status is not ProbeStatus.INCONCLUSIVE]
    return PairedCounts.from_outcomes(
        [j.obs.baseline_passed for j in usable],
        [j.obs.candidate_outcome.passed for j in usable],
    )


def _within_noise(judged: Sequence[Judged]) -> int:
    """Probes the baseline passed and the candidate failed, judged within noise or explained."""
    excused = (ProbeStatus.WITHIN_NOISE, ProbeStatus.EXPLAINED)
    return sum(
        1
        for j in judged
        if j.status in excused and j.obs.baseline_passed and not j.obs.candidate_outcome.passed
    )


def _rates(judged: Sequence[Judged]) -> dict[str, MetricValue]:
    """Pass rates with Wilson 95 % intervals and the exact McNemar p that the candidate is worse;
    regressions beyond noise and failures within it apart."""
    counts = _paired(judged)
    noise = _within_noise(judged)
    base_pass = counts.both_pass + counts.regressions
    cand_pass = counts.both_pass + counts.improvements
    b_ci, c_ci = wilson_interval(base_pass, counts.n), wilson_interval(cand_pass, counts.n)
    return {
        "failed_within_noise": noise,
        "regressions_beyond_noise": max(0, counts.regressions - noise),
        "n": counts.n,
        "baseline_rate": b_ci.rate,
        "baseline_ci": f"[{b_ci.low:.2f}, {b_ci.high:.2f}]",
        "candidate_rate": c_ci.rate,
        "candidate_ci": f"[{c_ci.low:.2f}, {c_ci.high:.2f}]",
        "regressions": counts.regressions,
        "improvements": counts.improvements,
        "mcnemar_p_candidate_worse": round(mcnemar_exact(counts).p_candidate_worse, 4),
    }


def category_rates(judged: Sequence[Judged]) -> dict[str, dict[str, MetricValue]]:
    """Per-category paired pass rates, plus the structured (json + tools) aggregate."""
    out = {}
    for category in sorted({j.obs.probe.category for j in judged}):
        out[category] = _rates([j for j in judged if j.obs.probe.category == category])
    structured = [j for j in judged if j.obs.probe.category in STRUCTURED_CATEGORIES]
    if structured:
        out["structured"] = _rates(structured)
    return out
