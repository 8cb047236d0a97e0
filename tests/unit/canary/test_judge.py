"""The canary's interval judgement: the gates' checks and decision rule (verdict/judgement.py),
rates by one-sided Fisher exact as the performance gate judges its error rate, latencies per
block. The latency cases are measured intervals of the reference engine through the real proxy
(data/measured_intervals.json, `python benchmarks/canary_intervals.py --requests 80`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from servegate.canary.judge import JUDGED, judge_interval, latency_check, rate_check
from servegate.canary.protocol import METRICS
from servegate.config.models import CanaryPolicy, Policy
from servegate.verdict.model import Outcome

POLICY = Policy()
MEASURED: dict[str, Any] = json.loads(
    (Path(__file__).parent / "data/measured_intervals.json").read_text(encoding="utf-8")
)


def rates(ones: int, n: int) -> list[float]:
    return [1.0] * ones + [0.0] * (n - ones)


def interval(name: str, side: str) -> dict[str, list[float]]:
    values: dict[str, list[float]] = MEASURED[name][side]
    return values


def test_every_judged_metric_is_a_protocol_metric() -> None:
    assert set(JUDGED) <= set(METRICS)


def test_a_measured_benign_candidate_passes_every_check() -> None:
    judged = judge_interval(interval("benign", "primary"), interval("benign", "candidate"), POLICY)
    assert judged.outcome == "pass", judged.reason
    measured = {c.name for c in judged.checks if c.measured}
    assert {"error", "garbage", "e2el_ms", "ttft_ms"} <= measured


def test_a_measured_slow_candidate_fails_on_its_latency() -> None:
    judged = judge_interval(interval("slow", "primary"), interval("slow", "candidate"), POLICY)
    assert judged.outcome == "fail", judged.reason
    failed = {c.name for c in judged.checks if c.outcome is Outcome.FAIL}
    assert "e2el_ms" in failed, judged.reason
    assert {"error", "garbage"}.isdisjoint(failed)


def test_one_disturbed_block_is_not_a_regression() -> None:
    # Another process on the machine slows five answers in a row on the candidate's side. Per
    # request that is five significant outliers; per block it is one block, as in the gate.
    candidate = dict(interval("benign", "candidate"))
    e2el = list(candidate["e2el_ms"])
    e2el[5:10] = [3 * v for v in e2el[5:10]]
    candidate["e2el_ms"] = e2el
    check, _ = latency_check("e2el_ms", interval("benign", "primary")["e2el_ms"], e2el, POLICY)
    assert check.outcome is Outcome.PASS, check.reason


@pytest.mark.parametrize(
    ("metric", "primary", "candidate", "outcome"),
    [
        ("error", rates(0, 40), rates(1, 40), Outcome.PASS),  # +2.5 points, not significant
        ("error", rates(0, 40), rates(6, 40), Outcome.FAIL),  # +15 points, p = 0.013
        ("error", rates(0, 20), rates(6, 20), Outcome.FAIL),  # 30 % error bodies, p = 0.010
        ("error", rates(10, 400), rates(11, 400), Outcome.PASS),  # +0.25 points
        ("error", rates(0, 5), rates(5, 5), Outcome.FAIL),  # every candidate request hung
        ("json_parse_failure", rates(4, 40), rates(6, 40), Outcome.PASS),  # ×1.5
        ("json_parse_failure", rates(4, 40), rates(16, 40), Outcome.FAIL),  # ×4
        ("json_parse_failure", rates(0, 40), rates(8, 40), Outcome.FAIL),  # from none
        ("garbage", rates(0, 40), rates(40, 40), Outcome.FAIL),
        ("garbage", rates(0, 40), rates(1, 40), Outcome.PASS),  # one, not significant
    ],
    ids=["error-one-of-40", "error-six-of-40", "error-bodies-30pct", "error-quarter-point",
         "all-hung", "json-x1.5", "json-x4", "json-from-none", "garbage-all", "garbage-one"],
)  # fmt: skip
def test_rates_fail_when_beyond_their_band_and_significant_by_fisher(
    metric: str, primary: list[float], candidate: list[float], outcome: Outcome
) -> None:
    policy = Policy(canary=CanaryPolicy(min_requests=5))
    check, values = rate_check(metric, primary, candidate, policy)
    assert check.outcome is outcome, check.reason
    assert "Fisher" in check.reason
    assert values["p_value"] is not None


def test_the_error_band_is_the_policy_key() -> None:
    lax = POLICY.model_copy(update={"error_rate_increase_max": 0.2})
    assert rate_check("error", rates(0, 40), rates(6, 40), POLICY)[0].outcome is Outcome.FAIL
    assert rate_check("error", rates(0, 40), rates(6, 40), lax)[0].outcome is Outcome.PASS


def test_too_few_answers_are_not_measured_and_the_interval_is_not_judged() -> None:
    few = {name: values[:5] for name, values in interval("benign", "primary").items()}
    judged = judge_interval(few, interval("benign", "candidate"), POLICY)
    assert judged.outcome == "not measured"
    assert "too few answers: primary 5" in judged.reason


def test_too_few_blocks_for_significance_are_not_measured() -> None:
    primary, candidate = interval("benign", "primary"), interval("benign", "candidate")
    enough = POLICY.model_copy(
        update={"canary": POLICY.canary.model_copy(update={"min_requests": 15})}
    )
    check, values = latency_check("e2el_ms", primary["e2el_ms"][:15], candidate["e2el_ms"][:15],
                                  enough)  # fmt: skip
    assert (values["blocks_primary"], values["blocks_candidate"]) == (3, 3)
    assert check.outcome is Outcome.NOT_MEASURED
    assert "cannot show a significant rise" in check.reason


def test_a_failed_check_rolls_back_even_when_the_score_would_only_be_marginal() -> None:
    answers = interval("benign", "candidate")
    candidate = answers | {"garbage": [1.0] * len(answers["garbage"])}
    judged = judge_interval(interval("benign", "primary"), candidate, POLICY)
    assert judged.outcome == "fail"
    assert judged.score is not None
    assert judged.score_label in ("pass", "marginal")  # presentation only
    assert judged.reason.startswith("degenerate-answer rate")


def test_a_shift_the_secondary_shows_too_is_noise_not_a_regression() -> None:
    primary, candidate = rates(0, 40), rates(6, 40)
    noisy_secondary, quiet_secondary = rates(5, 40), rates(0, 40)
    assert rate_check("error", primary, candidate, POLICY)[0].outcome is Outcome.FAIL
    widened, values = rate_check("error", primary, candidate, POLICY, noisy_secondary)
    assert widened.outcome is Outcome.PASS, widened.reason
    assert values["secondary_increase"] == pytest.approx(0.125)
    assert rate_check("error", primary, candidate, POLICY, quiet_secondary)[0].outcome is (
        Outcome.FAIL
    )


def test_evidence_is_json_even_for_an_infinite_ratio() -> None:
    judged = judge_interval(
        interval("benign", "primary") | {"json_parse_failure": rates(0, 40)},
        interval("benign", "candidate") | {"json_parse_failure": rates(8, 40)},
        POLICY,
    )
    evidence = judged.evidence()
    [row] = [c for c in evidence["checks"] if c["name"] == "json_parse_failure"]
    assert row["ratio"] == "∞×"
    json.dumps(evidence, allow_nan=False)


def test_marginal_above_pass_is_refused() -> None:
    with pytest.raises(ValueError, match="marginal_score must not exceed pass_score"):
        CanaryPolicy(pass_score=70, marginal_score=80)


def test_a_latency_with_fewer_answers_than_min_requests_is_not_measured() -> None:
    # Measured on the integration test: 4 primary answers (2 blocks of 2) against 11 candidate
    # answers failed a benign candidate at p = 0.048, the smallest the blocks allow.
    from servegate.canary.judge import latency_check
    from servegate.config.models import CanaryPolicy, Policy

    policy = Policy(canary=CanaryPolicy(min_requests=5, latency_block_requests=2))
    check, _ = latency_check("e2el_ms", [130.0, 135.0, 137.0, 140.0], [240.0] * 11, policy)
    assert check.outcome == "not-measured"
    assert "too few answers: primary 4" in check.reason
