"""Kayenta-style judgement of one canary interval: each metric classified once, one score.

Every metric in `protocol.METRICS` is classified candidate vs primary as pass, high, low or not
measured by one function, `classify_metric`: HIGH needs both a significant one-sided Mann-Whitney
U (policy `significance_alpha`) and a shift beyond the metric's band (a policy key with a unit);
a shift in the harmless direction is never held against the candidate. With a secondary (a second
baseline replica) the primary-vs-secondary shift is the noise floor, Diffy-style: a candidate
shift no larger than `noise_k` times the secondary's is noise. `judge_interval` aggregates: any
critical metric HIGH fails the interval regardless of score; a core metric not measured leaves it
not measured (the controller holds); otherwise the weighted score decides pass / marginal / fail.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

from servegate.config.models import Policy
from servegate.stats.classification import Classification
from servegate.stats.distribution import DistributionSummary
from servegate.stats.mann_whitney import mann_whitney_u

Band = Literal["difference", "ratio"]
Outcome = Literal["pass", "marginal", "fail", "not measured"]
Samples = Mapping[str, Sequence[float]]


@dataclass(frozen=True)
class MetricRule:
    """How one metric is judged: its statistic, its band and where the band's limit lives."""

    statistic: str  # "mean" (a rate, for 0/1 metrics) or "p95"
    band: Band  # difference: candidate - primary; ratio: candidate / primary
    limit: Callable[[Policy], float]  # the largest allowed shift (difference, or ratio - 1)
    policy_key: str
    unit: str
    weight: float
    critical: bool = False  # HIGH rolls back regardless of the score
    core: bool = False  # not measured: the interval cannot be judged


# The weights are Kayenta's metric-group weights: correctness counts three times latency.
RULES: Mapping[str, MetricRule] = {
    "error": MetricRule(
        "mean", "difference", lambda policy: policy.error_rate_increase_max,
        "error_rate_increase_max", "fraction of requests", 3.0, critical=True, core=True,
    ),
    "timeout": MetricRule(
        "mean", "difference", lambda policy: policy.error_rate_increase_max,
        "error_rate_increase_max", "fraction of requests", 3.0, critical=True,
    ),
    "garbage": MetricRule(
        "mean", "difference", lambda policy: policy.canary.garbage_rate_increase_max,
        "canary.garbage_rate_increase_max", "fraction of answers", 3.0, critical=True, core=True,
    ),
    "json_parse_failure": MetricRule(
        "mean", "ratio", lambda policy: policy.canary.parse_failure_ratio_max - 1,
        "canary.parse_failure_ratio_max", "× the primary's rate", 2.0, critical=True,
    ),
    "tool_call_parse_failure": MetricRule(
        "mean", "ratio", lambda policy: policy.canary.parse_failure_ratio_max - 1,
        "canary.parse_failure_ratio_max", "× the primary's rate", 2.0, critical=True,
    ),
    "ttft_ms": MetricRule(
        "p95", "ratio", lambda policy: policy.p95_latency_regression_max,
        "p95_latency_regression_max", "fraction of the primary's P95", 1.0,
    ),
    "e2el_ms": MetricRule(
        "p95", "ratio", lambda policy: policy.p95_latency_regression_max,
        "p95_latency_regression_max", "fraction of the primary's P95", 1.0, core=True,
    ),
    "empty_output": MetricRule(
        "mean", "difference", lambda policy: policy.canary.content_ratio_increase_max,
        "canary.content_ratio_increase_max", "fraction of answers", 1.0,
    ),
    "repeated_token_ratio": MetricRule(
        "mean", "difference", lambda policy: policy.canary.content_ratio_increase_max,
        "canary.content_ratio_increase_max", "fraction (absolute)", 1.0,
    ),
    "abnormal_char_ratio": MetricRule(
        "mean", "difference", lambda policy: policy.canary.content_ratio_increase_max,
        "canary.content_ratio_increase_max", "fraction (absolute)", 1.0,
    ),
}  # fmt: skip


@dataclass(frozen=True)
class MetricJudgement:
    """One metric's classification in one interval, with the numbers behind it."""

    metric: str
    classification: Classification
    reason: str
    n_primary: int
    n_candidate: int
    primary: float | None  # the rule's statistic on each side
    candidate: float | None
    shift: float | None  # candidate - primary (difference) or candidate / primary - 1 (ratio)
    limit: float
    policy_key: str
    p_value: float | None
    effect: float | None  # P(candidate > primary) + ties / 2
    weight: float
    critical: bool
    secondary_shift: float | None = None  # the same shift, secondary vs primary


@dataclass(frozen=True)
class IntervalJudgement:
    """The interval's outcome: pass (promote), marginal (hold), fail (roll back) or not
    measured (hold), with the score and every metric's judgement."""

    outcome: Outcome
    reason: str
    score: float | None
    metrics: tuple[MetricJudgement, ...]

    def evidence(self) -> dict[str, Any]:
        """JSON-able: what a decision records and the webhook shows."""
        return {
            "outcome": self.outcome,
            "reason": self.reason,
            "score": self.score,
            "metrics": [
                {k: _json_number(v) for k, v in asdict(m).items()}
                | {"classification": m.classification.value}
                for m in self.metrics
            ],
        }


def _json_number(value: Any) -> Any:
    # A ratio against a primary rate of 0 is infinite; JSON has no infinity.
    if isinstance(value, float) and not math.isfinite(value):
        return "inf" if value > 0 else "-inf"
    return value


def _shift(rule: MetricRule, primary: float, candidate: float) -> float:
    if rule.band == "difference":
        return candidate - primary
    if primary == 0:
        return 0.0 if candidate == 0 else float("inf")
    return candidate / primary - 1


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def classify_metric(
    metric: str,
    primary: Sequence[float],
    candidate: Sequence[float],
    policy: Policy,
    secondary: Sequence[float] | None = None,
) -> MetricJudgement:
    """Classify one metric of the candidate against the primary (the one rule for every metric)."""
    rule = RULES[metric]
    limit = rule.limit(policy)
    p_sum = DistributionSummary.from_values(primary)
    c_sum = DistributionSummary.from_values(candidate)
    p_stat, c_stat = p_sum.statistic(rule.statistic), c_sum.statistic(rule.statistic)

    def result(
        kind: Classification,
        reason: str,
        shift: float | None = None,
        p: float | None = None,
        effect: float | None = None,
        secondary_shift: float | None = None,
    ) -> MetricJudgement:
        return MetricJudgement(
            metric, kind, reason, p_sum.count, c_sum.count, p_stat, c_stat, shift, limit,
            rule.policy_key, p, effect, rule.weight, rule.critical, secondary_shift,
        )  # fmt: skip

    need = policy.canary.min_requests
    if p_sum.count < need or c_sum.count < need:
        return result(
            Classification.NOT_MEASURED,
            f"too few samples: primary {p_sum.count}, candidate {c_sum.count} (need {need} each, "
            "policy canary.min_requests)",
        )
    assert p_stat is not None
    assert c_stat is not None
    shift = _shift(rule, p_stat, c_stat)
    mw = mann_whitney_u(primary, candidate, alternative="greater")
    alpha = policy.significance_alpha
    shown = f"{rule.statistic} {_fmt(c_stat)} vs primary {_fmt(p_stat)}"
    band = f"{'+' if rule.band == 'difference' else '×'}"
    allowed = limit if rule.band == "difference" else 1 + limit
    # "Doubled" fails at exactly twice; a difference must exceed its limit.
    beyond = shift >= limit if rule.band == "ratio" else shift > limit
    if not (mw.p_value < alpha and beyond):
        why = (
            f"not significant (p = {mw.p_value:.2g})"
            if mw.p_value >= alpha
            else f"inside the allowed {band}{allowed:.3g} ({rule.policy_key})"
        )
        return result(Classification.PASS, f"{shown}, {why}", shift, mw.p_value, mw.effect)
    high = (
        f"{shown}: beyond the allowed {band}{allowed:.3g} ({rule.policy_key}), "
        f"Mann-Whitney p = {mw.p_value:.2g} < {alpha:.2g}"
    )
    if secondary is None or len(secondary) < need:
        return result(Classification.HIGH, high, shift, mw.p_value, mw.effect)
    s_stat = DistributionSummary.from_values(secondary).statistic(rule.statistic)
    assert s_stat is not None
    s_shift = _shift(rule, p_stat, s_stat)
    # Diffy: the two baselines differ by a comparable amount, so this shift is the floor's.
    if s_shift > 0 and shift <= policy.noise_k * s_shift:
        return result(
            Classification.PASS,
            f"{shown}: within noise — the secondary's shift {s_shift:.3g} × noise_k "
            f"{policy.noise_k:g} covers the candidate's {shift:.3g}",
            shift, mw.p_value, mw.effect, s_shift,
        )  # fmt: skip
    return result(Classification.HIGH, high, shift, mw.p_value, mw.effect, s_shift)


def judge_interval(
    primary: Samples,
    candidate: Samples,
    policy: Policy,
    secondary: Samples | None = None,
) -> IntervalJudgement:
    """Classify every metric and aggregate them into the interval's outcome."""
    metrics = tuple(
        classify_metric(
            name,
            primary.get(name, ()),
            candidate.get(name, ()),
            policy,
            None if secondary is None else secondary.get(name, ()),
        )
        for name in RULES
    )
    measured = [m for m in metrics if m.classification is not Classification.NOT_MEASURED]
    critical = [m for m in metrics if m.critical and m.classification is Classification.HIGH]
    score = (
        round(
            100
            * sum(m.weight for m in measured if m.classification is Classification.PASS)
            / sum(m.weight for m in measured),
            2,
        )
        if measured
        else None
    )
    if critical:
        why = "; ".join(f"{m.metric}: {m.reason}" for m in critical)
        return IntervalJudgement("fail", f"critical metric high — {why}", score, metrics)
    gaps = [m for m in metrics if RULES[m.metric].core and m not in measured]
    if gaps or score is None:
        why = "; ".join(f"{m.metric}: {m.reason}" for m in gaps) or "nothing measured"
        return IntervalJudgement("not measured", why, score, metrics)
    high = ", ".join(m.metric for m in measured if m.classification is not Classification.PASS)
    tail = f" ({high} high)" if high else ""
    pass_mark, marginal_mark = policy.canary.pass_score, policy.canary.marginal_score
    if score >= pass_mark:
        return IntervalJudgement(
            "pass", f"score {score:g} ≥ pass {pass_mark:g}{tail}", score, metrics
        )
    if score >= marginal_mark:
        return IntervalJudgement(
            "marginal",
            f"score {score:g} below pass {pass_mark:g}, not below marginal {marginal_mark:g}{tail}",
            score,
            metrics,
        )
    return IntervalJudgement(
        "fail", f"score {score:g} < marginal {marginal_mark:g}{tail}", score, metrics
    )
