"""The canary's interval judgement on plain data: the seed's rollback rules, not measured never
passes, critical metrics override the score, and a secondary's noise is not held against the
candidate."""

from __future__ import annotations

import random

import pytest

from servegate.canary.judge import RULES, classify_metric, judge_interval
from servegate.canary.protocol import METRICS
from servegate.config.models import CanaryPolicy, Policy
from servegate.stats.classification import Classification

POLICY = Policy()
N = 40


def rates(ones: int, n: int = N) -> list[float]:
    return [1.0] * ones + [0.0] * (n - ones)


def latencies(center: float, n: int = N, seed: int = 0) -> list[float]:
    rng = random.Random(seed)
    return [center * rng.uniform(0.9, 1.1) for _ in range(n)]


def healthy(n: int = N, seed: int = 0) -> dict[str, list[float]]:
    return {
        "error": rates(0, n),
        "timeout": rates(0, n),
        "garbage": rates(0, n),
        "e2el_ms": latencies(200, n, seed),
        "ttft_ms": latencies(40, n, seed + 1),
        "empty_output": rates(0, n),
        "repeated_token_ratio": [0.02] * n,
        "abnormal_char_ratio": [0.0] * n,
    }


def test_every_protocol_metric_has_one_rule() -> None:
    assert set(RULES) == set(METRICS)


def test_identical_healthy_sides_pass_with_a_full_score() -> None:
    judged = judge_interval(healthy(), healthy(seed=5), POLICY)
    assert (judged.outcome, judged.score) == ("pass", 100.0)
    unmeasured = {m.metric for m in judged.metrics if m.classification == "not measured"}
    assert unmeasured == {"json_parse_failure", "tool_call_parse_failure"}  # no JSON was asked


@pytest.mark.parametrize(
    ("metric", "primary", "candidate", "classification"),
    [
        ("error", rates(0), rates(1), Classification.PASS),  # +2.5 points, not significant
        ("error", rates(0), rates(6), Classification.HIGH),  # +15 points, significant
        ("error", rates(10, 400), rates(11, 400), Classification.PASS),  # +0.25 points
        ("e2el_ms", latencies(200), latencies(230, seed=1), Classification.PASS),  # +15 %
        ("e2el_ms", latencies(200), latencies(260, seed=1), Classification.HIGH),  # +30 %
        ("e2el_ms", latencies(200), latencies(120, seed=1), Classification.PASS),  # faster
        ("json_parse_failure", rates(4), rates(6), Classification.PASS),  # ×1.5
        ("json_parse_failure", rates(4), rates(16), Classification.HIGH),  # ×4
        ("json_parse_failure", rates(0), rates(8), Classification.HIGH),  # from none
        ("garbage", rates(0), rates(N), Classification.HIGH),
        ("garbage", rates(0), rates(1), Classification.PASS),  # one, not significant
        ("repeated_token_ratio", [0.02] * N, [0.9] * N, Classification.HIGH),
    ],
    ids=[
        "error-one-of-40", "error-six-of-40", "error-quarter-point", "p95-plus-15pct",
        "p95-plus-30pct", "faster", "json-x1.5", "json-x4", "json-from-none", "garbage-all",
        "garbage-one", "repeated-tokens",
    ],
)  # fmt: skip
def test_the_seed_rules_classify_each_metric(
    metric: str, primary: list[float], candidate: list[float], classification: Classification
) -> None:
    judged = classify_metric(metric, primary, candidate, POLICY)
    assert judged.classification == classification, judged.reason
    assert judged.policy_key in judged.reason or classification == Classification.PASS


def test_the_error_rule_is_one_point_of_the_policy() -> None:
    strict = POLICY.model_copy(update={"error_rate_increase_max": 0.0})
    lax = POLICY.model_copy(update={"error_rate_increase_max": 0.2})
    assert classify_metric("error", rates(0), rates(6), strict).classification == "high"
    assert classify_metric("error", rates(0), rates(6), lax).classification == "pass"


def test_too_few_samples_are_not_measured_and_the_interval_is_not_judged() -> None:
    few = healthy(n=5)
    judged = judge_interval(few, healthy(), POLICY)
    assert judged.outcome == "not measured"
    assert judged.score is None
    assert "too few samples: primary 5" in judged.reason


def test_a_critical_failure_rolls_back_whatever_the_score() -> None:
    candidate = healthy(seed=3) | {"garbage": rates(N)}
    judged = judge_interval(healthy(), candidate, POLICY)
    assert judged.outcome == "fail"
    assert judged.score is not None
    assert judged.score > 75  # the score alone would only be marginal
    assert judged.reason.startswith("critical metric high — garbage:")


@pytest.mark.parametrize(
    ("candidate_changes", "outcome"),
    [
        ({"e2el_ms": latencies(300, seed=9)}, "marginal"),  # 13 of 14 weight: 92.9
        ({"e2el_ms": latencies(300, seed=9), "ttft_ms": latencies(60, seed=9)}, "marginal"),  # 85.7
        (
            {
                "e2el_ms": latencies(300, seed=9),
                "ttft_ms": latencies(60, seed=9),
                "empty_output": rates(20),
                "repeated_token_ratio": [0.5] * N,
            },
            "fail",  # 10 of 14: 71.4
        ),
    ],
    ids=["latency-high", "two-latencies-high", "four-high"],
)
def test_the_weighted_score_decides_between_pass_marginal_and_fail(
    candidate_changes: dict[str, list[float]], outcome: str
) -> None:
    judged = judge_interval(healthy(), healthy(seed=4) | candidate_changes, POLICY)
    assert judged.outcome == outcome, judged.reason


def test_a_shift_the_secondary_shows_too_is_noise_not_a_regression() -> None:
    primary = healthy()
    candidate = healthy(seed=2) | {"e2el_ms": latencies(280, seed=2)}
    noisy_secondary = healthy(seed=3) | {"e2el_ms": latencies(270, seed=3)}
    quiet_secondary = healthy(seed=3)
    alone = judge_interval(primary, candidate, POLICY)
    with_noise = judge_interval(primary, candidate, POLICY, noisy_secondary)
    with_quiet = judge_interval(primary, candidate, POLICY, quiet_secondary)
    e2el = {j: next(m for m in j.metrics if m.metric == "e2el_ms") for j in (alone, with_noise)}
    assert e2el[alone].classification == "high"
    assert e2el[with_noise].classification == "pass"
    assert "within noise" in e2el[with_noise].reason
    assert next(m for m in with_quiet.metrics if m.metric == "e2el_ms").classification == "high"


def test_evidence_is_json_even_for_an_infinite_ratio() -> None:
    import json

    judged = judge_interval(
        healthy() | {"json_parse_failure": rates(0)},
        healthy() | {"json_parse_failure": rates(8)},
        POLICY,
    )
    metrics = judged.evidence()["metrics"]
    json_metric = next(m for m in metrics if m["metric"] == "json_parse_failure")
    assert json_metric["shift"] == "inf"
    json.dumps(judged.evidence(), allow_nan=False)


def test_marginal_above_pass_is_refused() -> None:
    with pytest.raises(ValueError, match="marginal_score must not exceed pass_score"):
        CanaryPolicy(pass_score=70, marginal_score=80)
