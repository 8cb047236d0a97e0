"""Judgement of one canary interval with the gates' own checks and decision rule.

Each interval becomes `Check`s (verdict/judgement.py) and `judge` — the rule every gate uses —
decides: any failed check fails the interval (the controller rolls back), a core check not
measured leaves it inconclusive (the controller holds), otherwise it passes (promote).

- Rates (the share of answers the one answer classifier, `servegate.endpoints.answers`, did not call
  ok; timeouts; degenerate, empty, invalid-JSON, invalid-tool-call answers) are judged as the
  performance gate judges its error rate: candidate − primary beyond the policy's band *and* a
  one-sided Fisher exact test below `significance_alpha`. The JSON and tool-call rates are
  ratios (`canary.parse_failure_ratio_max` × the primary's rate).
- Latencies (TTFT, E2EL of ok answers) are judged per block, as the performance gate judges
  them: each side's answers, in arrival order, are cut into blocks of
  `canary.latency_block_requests`; the ratio is of the median block P95, the test a one-sided
  Mann-Whitney U over block P95s, the band `p95_latency_regression_max`. Too few blocks to reach
  significance is not measured.
- With a secondary (a second primary replica, served as much as the candidate) the primary's own
  deviation from it widens each band, Diffy style: a rate's band grows to `noise_k` × the
  secondary's increase; a latency band by `performance_aa_k` × the secondary's deviation (the
  gate's A/A floor), and beyond `performance_aa_max` the latency is not measured.

A Kayenta-style score (the weighted share of measured checks that pass) is kept as presentation
only: it is shown with its pass/marginal marks, and decides nothing.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from servegate.config.models import Policy
from servegate.stats.aa import deviation, widen_factor
from servegate.stats.classification import Classification, classify
from servegate.stats.distribution import DistributionSummary
from servegate.stats.mann_whitney import can_be_significant, smallest_p
from servegate.stats.proportions import rate_increase
from servegate.verdict.judgement import check, judge, not_measured
from servegate.verdict.model import Check, Outcome, Status

IntervalOutcome = Literal["pass", "fail", "not measured"]
Samples = Mapping[str, Sequence[float]]


@dataclass(frozen=True)
class RateRule:
    """A 0/1 metric judged as a rate: its title, band and where the band's limit lives."""

    title: str
    limit: Callable[[Policy], float]  # difference: allowed increase; ratio: allowed factor
    policy_key: str
    band: Literal["difference", "ratio"] = "difference"
    core: bool = False
    weight: float = 3.0  # presentation only (the Kayenta score)


@dataclass(frozen=True)
class LatencyRule:
    title: str
    core: bool = False
    weight: float = 1.0


RATES: Mapping[str, RateRule] = {
    "error": RateRule(
        "error rate (answers not ok by the answer classifier), candidate − primary",
        lambda policy: policy.error_rate_increase_max, "error_rate_increase_max", core=True,
    ),
    "timeout": RateRule(
        "timeout rate (deadline passed, silent, or abandoned by the user), candidate − primary",
        lambda policy: policy.error_rate_increase_max, "error_rate_increase_max",
    ),
    "garbage": RateRule(
        "degenerate-answer rate, candidate − primary",
        lambda policy: policy.canary.garbage_rate_increase_max, "canary.garbage_rate_increase_max",
    ),
    "empty_output": RateRule(
        "empty-answer rate, candidate − primary",
        lambda policy: policy.canary.content_ratio_increase_max,
        "canary.content_ratio_increase_max", weight=1.0,
    ),
    "json_parse_failure": RateRule(
        "JSON parse-failure rate where JSON was asked, candidate / primary",
        lambda policy: policy.canary.parse_failure_ratio_max, "canary.parse_failure_ratio_max",
        band="ratio", weight=2.0,
    ),
    "tool_call_parse_failure": RateRule(
        "tool-call argument parse-failure rate, candidate / primary",
        lambda policy: policy.canary.parse_failure_ratio_max, "canary.parse_failure_ratio_max",
        band="ratio", weight=2.0,
    ),
}  # fmt: skip
LATENCIES: Mapping[str, LatencyRule] = {
    "ttft_ms": LatencyRule("TTFT median block P95, candidate / primary"),
    "e2el_ms": LatencyRule("E2EL median block P95, candidate / primary", core=True),
}
JUDGED = frozenset({*RATES, *LATENCIES})  # the observation metrics an interval keeps


@dataclass(frozen=True)
class IntervalJudgement:
    """The interval's outcome with every check behind it, the numbers the checks were made on,
    and the Kayenta-style score (presentation only)."""

    outcome: IntervalOutcome
    reason: str
    checks: tuple[Check, ...]
    values: Mapping[str, Mapping[str, float | int | None]]
    score: float | None
    score_label: str | None  # pass / marginal / fail by the canary.*_score marks

    def evidence(self) -> dict[str, Any]:
        """JSON-able: what a decision records and the webhook shows."""
        return {
            "outcome": self.outcome,
            "reason": self.reason,
            "checks": [c.model_dump(mode="json") for c in self.checks],
            "values": {k: {n: _json(v) for n, v in row.items()} for k, row in self.values.items()},
            "score": self.score,
            "score_label": self.score_label,
            "score_note": "Kayenta-style score, presentation only: the checks decide",
        }


def _json(value: float | int | None) -> float | int | str | None:
    if isinstance(value, float) and not math.isfinite(value):
        return "inf" if value > 0 else "-inf"
    return value


def _ones(values: Sequence[float]) -> int:
    return sum(1 for v in values if v)


def _pct(failed: int, n: int) -> str:
    return f"{failed}/{n} ({failed / n:.1%})"


def rate_check(
    metric: str,
    primary: Sequence[float],
    candidate: Sequence[float],
    policy: Policy,
    secondary: Sequence[float] | None = None,
) -> tuple[Check, dict[str, float | int | None]]:
    """One rate: beyond its band and significant (one-sided Fisher exact) fails."""
    rule = RATES[metric]
    need = policy.canary.min_requests
    nb, nc = len(primary), len(candidate)
    values: dict[str, float | int | None] = {"n_primary": nb, "n_candidate": nc}
    if nb < need or nc < need:
        why = f"too few answers: primary {nb}, candidate {nc} (need {need} each, "
        why += "canary.min_requests)"
        return not_measured(metric, rule.title, why, core=rule.core), values
    fb, fc = _ones(primary), _ones(candidate)
    inc = rate_increase(fb, nb, fc, nc)
    assert inc.increase is not None
    assert inc.baseline_rate is not None
    assert inc.candidate_rate is not None
    alpha, limit = policy.significance_alpha, rule.limit(policy)
    values |= {"primary": inc.baseline_rate, "candidate": inc.candidate_rate,
               "p_value": inc.p_value}  # fmt: skip
    floor = ""
    if secondary is not None and len(secondary) >= need:
        s_inc = rate_increase(fb, nb, _ones(secondary), len(secondary)).increase
        assert s_inc is not None
        values["secondary_increase"] = s_inc
        if rule.band == "difference" and s_inc > 0 and policy.noise_k * s_inc > limit:
            limit = policy.noise_k * s_inc
            floor = f"; widened to noise_k × the secondary's +{s_inc * 100:.1f} pts"
    if rule.band == "difference":
        shown = f"{inc.increase * 100:+.1f} pts"
        bound = f"≤ +{limit * 100:.3g} pts unless not significant (Fisher p < {alpha:g}){floor}"
    else:
        ratio = inc.ratio if inc.ratio is not None else 0.0
        shown = "∞×" if math.isinf(ratio) else f"{ratio:.2f}×"
        bound = f"< {limit:g}× unless not significant (Fisher p < {alpha:g})"
    failed = inc.regressed(limit, alpha, rule.band)
    return check(
        metric,
        rule.title,
        failed=failed,
        baseline=_pct(fb, nb),
        candidate=_pct(fc, nc),
        ratio=shown,
        limit=bound,
        policy_key=rule.policy_key,
        core=rule.core,
        reason=f"{shown}, one-sided Fisher exact p = {inc.p_value:.2g}",
    ), values


def _blocks(values: Sequence[float], size: int) -> list[float]:
    """P95 of each full block of `size` consecutive values (a last partial block is dropped),
    linear-interpolated as DistributionSummary computes it."""
    full = len(values) // size
    if not full:
        return []
    blocks = np.asarray(values[: full * size], dtype=float).reshape(full, size)
    return [float(v) for v in np.percentile(blocks, 95, axis=1)]


def _median(values: Sequence[float]) -> float:
    median = DistributionSummary.from_values(values).p50
    assert median is not None
    return median


def latency_check(
    metric: str,
    primary: Sequence[float],
    candidate: Sequence[float],
    policy: Policy,
    secondary: Sequence[float] | None = None,
) -> tuple[Check, dict[str, float | int | None]]:
    """One latency, per block: significant (Mann-Whitney over block P95s) and beyond the band
    fails; too few blocks to reach significance is not measured."""
    rule = LATENCIES[metric]
    size, alpha = policy.canary.latency_block_requests, policy.significance_alpha
    bb, cb = _blocks(primary, size), _blocks(candidate, size)
    values: dict[str, float | int | None] = {
        "n_primary": len(primary), "n_candidate": len(candidate),
        "blocks_primary": len(bb), "blocks_candidate": len(cb),
    }  # fmt: skip
    need = policy.canary.min_requests
    if len(primary) < need or len(candidate) < need:
        # The same floor as the rates: with 4 primary answers (2 blocks) against 11, a benign
        # candidate failed at the smallest p the blocks allow (0.048) on the integration test.
        why = f"too few answers: primary {len(primary)}, candidate {len(candidate)} (need "
        why += f"{need} each, canary.min_requests)"
        return not_measured(metric, rule.title, why, core=rule.core), values
    if not can_be_significant(len(bb), len(cb), alpha):
        floor_p = smallest_p(len(bb), len(cb))
        why = (
            f"{len(bb)} primary and {len(cb)} candidate blocks of {size} answers cannot show a "
            f"significant rise (smallest possible p {floor_p:.2g} ≥ {alpha:g}); "
            "canary.latency_block_requests"
        )
        return not_measured(metric, rule.title, why, core=rule.core), values
    allowed, widen, floor = policy.p95_latency_regression_max, 1.0, ""
    sb = _blocks(secondary, size) if secondary is not None else []
    if len(sb) >= 2:
        aa = _median(sb) / _median(bb) if _median(bb) > 0 else 1.0
        d = deviation(aa) or 0.0
        values["secondary_ratio"] = aa
        if d > policy.performance_aa_max:
            why = (
                f"primary and secondary differ by {aa:.2f}× in this interval; too noisy to "
                f"judge (performance_aa_max {policy.performance_aa_max:g})"
            )
            return not_measured(metric, rule.title, why, core=rule.core), values
        widen = widen_factor(d, policy.performance_aa_k)
        floor = f"; widened ×{widen:.2f} by the secondary's deviation (performance_aa_k)"
    band = (1 + allowed) * widen - 1
    cls = classify(
        metric, bb, cb, direction="increase", allowed_increase=band, statistic="p50",
        alpha=alpha, min_samples=2,
    )  # fmt: skip
    values |= {"primary": _median(bb), "candidate": _median(cb), "ratio": cls.ratio,
               "p_value": cls.p_value}  # fmt: skip
    ratio = "-" if cls.ratio is None else f"{cls.ratio:.2f}×"
    return check(
        metric,
        rule.title,
        failed=cls.classification is Classification.HIGH,
        baseline=f"{_median(bb):.4g} ms (median block P95)",
        candidate=f"{_median(cb):.4g} ms (median block P95)",
        ratio=ratio,
        limit=f"≤ {1 + band:.2f}× unless not significant (Mann-Whitney p < {alpha:g}){floor}",
        policy_key="p95_latency_regression_max",
        core=rule.core,
        reason=cls.reason,
    ), values


def _score(checks: Sequence[Check]) -> float | None:
    weights = {**{k: r.weight for k, r in RATES.items()},
               **{k: r.weight for k, r in LATENCIES.items()}}  # fmt: skip
    measured = [c for c in checks if c.measured]
    if not measured:
        return None
    passed = sum(weights[c.name] for c in measured if c.outcome is Outcome.PASS)
    return round(100 * passed / sum(weights[c.name] for c in measured), 2)


def judge_interval(
    primary: Samples,
    candidate: Samples,
    policy: Policy,
    secondary: Samples | None = None,
) -> IntervalJudgement:
    """Every check of the interval and the outcome the gates' rule gives them."""
    checks: list[Check] = []
    values: dict[str, Mapping[str, float | int | None]] = {}
    measures = [(m, rate_check) for m in RATES] + [(m, latency_check) for m in LATENCIES]
    for metric, make in measures:
        made, numbers = make(
            metric, primary.get(metric, ()), candidate.get(metric, ()), policy,
            None if secondary is None else secondary.get(metric, ()),
        )  # fmt: skip
        checks.append(made)
        values[metric] = numbers
    status, reason = judge(checks)
    outcome: IntervalOutcome = (
        "fail" if status is Status.FAIL else "pass" if status is Status.PASS else "not measured"
    )
    score = _score(checks)
    label = None
    if score is not None:
        label = (
            "pass"
            if score >= policy.canary.pass_score
            else "marginal"
            if score >= policy.canary.marginal_score
            else "fail"
        )
    return IntervalJudgement(outcome, reason, tuple(checks), values, score, label)
