"""The replay's sampled checks on plain data: pairs drawn from one distribution pass at the
stated rate, the broken samplers and kernels the checks are for fail, too few pairs are not
measured — and the replay judges sampled pairs by these checks, never answer by answer."""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Any

import pytest

from servegate.config.policy import SamplingPolicy
from servegate.proxy.comparison import PairComparison
from servegate.proxy.sampled import (
    SampledPair,
    SampledWindow,
    request_key,
    sampled_checks,
)
from servegate.verdict.model import Outcome
from servegate.verdict.sampled_checks import MIN_REPEATS

POLICY = SamplingPolicy()
BASE = PairComparison(
    path="/v1/chat/completions", greedy=False, primary_ok=True, candidate_ok=True,
    exact_match=None, first_divergence_char=None, first_divergence_token=None,
    same_finish_reason=True, candidate_degenerate=None,
    primary_metrics={"garbage": 0.0, "empty_output": 0.0},
    candidate_metrics={"garbage": 0.0, "empty_output": 0.0},
    ttft_delta_ms=None, e2el_delta_ms=None, min_embedding_cosine=None,
)  # fmt: skip
OPENINGS = ("The city of", "Paris is a", "I would say", "Rome, because", "Berlin is the")


def _request(i: int) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": f"q{i % 3}"}], "temperature": 0.8}


def _answer(rng: random.Random, side: str, **shape: Any) -> dict[str, Any]:
    """One side's sampled answer from the healthy distribution, `shape` overriding it."""
    out = {
        f"{side}_length_chars": rng.randint(40, 120),
        f"{side}_finish_reason": rng.choice(("stop", "stop", "length")),
        f"{side}_opening": rng.choice(OPENINGS),
        f"{side}_symbol_ratio": rng.uniform(0.02, 0.08),
    }
    out.update({f"{side}_{k}": v for k, v in shape.items()})
    return out


def _pairs(rng: random.Random, n: int, **candidate: Any) -> list[SampledPair]:
    return [
        SampledPair.of(
            _request(i),
            replace(BASE, **_answer(rng, "primary"), **_answer(rng, "candidate", **candidate)),
        )
        for i in range(n)
    ]


def _by_name(pairs: list[SampledPair]) -> dict[str, Outcome]:
    return {c.name: c.outcome for c in sampled_checks(pairs, POLICY)}


def test_pairs_from_one_distribution_pass_every_measurable_check() -> None:
    outcomes = _by_name(_pairs(random.Random(1), 72))
    assert outcomes == {
        "sampled_degenerate": Outcome.PASS,
        "sampled_empty": Outcome.PASS,
        "sampled_json": Outcome.NOT_MEASURED,  # no request asked for JSON
        "sampled_finish": Outcome.PASS,
        "sampled_length": Outcome.PASS,
        "sampled_symbols": Outcome.PASS,
        "sampled_openings": Outcome.PASS,
    }


def test_the_family_false_alarm_rate_is_within_its_statement() -> None:
    # 400 replays of 72 pairs from one distribution: the checks together must stay within the
    # module's "about 0.7 %"; exact tests are conservative, so the count is expected near 0.
    rng = random.Random(7)
    alarms = sum(
        any(c.outcome is Outcome.FAIL for c in sampled_checks(_pairs(rng, 72), POLICY))
        for _ in range(400)
    )
    assert alarms <= 4


def test_a_candidate_answering_greedily_fails_on_its_openings_alone() -> None:
    checks = {c.name: c for c in sampled_checks(_pairs(random.Random(2), 72, opening="The city of"),
                                                 POLICY)}  # fmt: skip
    failed = [name for name, c in checks.items() if c.outcome is Outcome.FAIL]
    assert failed == ["sampled_openings"]
    assert "1 distinct openings" in checks["sampled_openings"].candidate
    assert checks["sampled_openings"].policy_key == "sampling.alpha"


def test_word_salad_fails_on_symbols_where_no_single_answer_is_degenerate() -> None:
    rng = random.Random(3)
    pairs = _pairs(rng, 72, symbol_ratio=0.35)
    checks = {c.name: c for c in sampled_checks(pairs, POLICY)}
    assert checks["sampled_symbols"].outcome is Outcome.FAIL
    assert checks["sampled_degenerate"].outcome is Outcome.PASS
    assert "mean 35% against" in checks["sampled_symbols"].reason


def test_a_candidate_that_never_stops_fails_on_stopping() -> None:
    checks = _by_name(_pairs(random.Random(4), 72, finish_reason="length"))
    assert checks["sampled_finish"] is Outcome.FAIL


def test_degenerate_answers_where_the_baseline_writes_fail_by_mcnemar() -> None:
    rng = random.Random(5)
    pairs = [
        SampledPair(p.key, replace(p.comparison, candidate_metrics={"garbage": 1.0,
                                                                         "empty_output": 0.0}))
        if i % 4 == 0 else p
        for i, p in enumerate(_pairs(rng, 72))
    ]  # fmt: skip
    checks = {c.name: c for c in sampled_checks(pairs, POLICY)}
    assert checks["sampled_degenerate"].outcome is Outcome.FAIL
    assert checks["sampled_degenerate"].candidate.startswith("18 pair(s) degenerate")


def test_one_degenerate_sampled_answer_is_chance_not_a_regression() -> None:
    pairs = _pairs(random.Random(6), 72)
    pairs[0] = SampledPair(pairs[0].key, replace(
        pairs[0].comparison, candidate_metrics={"garbage": 1.0, "empty_output": 0.0}))  # fmt: skip
    assert _by_name(pairs)["sampled_degenerate"] is Outcome.PASS


def test_too_few_pairs_are_not_measured_never_a_pass() -> None:
    checks = sampled_checks(_pairs(random.Random(8), MIN_REPEATS - 1), POLICY)
    assert {c.outcome for c in checks} == {Outcome.NOT_MEASURED}
    assert all(c.reason for c in checks)


def test_every_passing_check_states_its_power_and_policy_key() -> None:
    for c in sampled_checks(_pairs(random.Random(9), 72), POLICY):
        if c.outcome is Outcome.PASS:
            assert "power:" in c.limit, c
        if c.outcome is Outcome.PASS and c.name != "sampled_openings":
            assert "probability ≥ 0.9" in c.limit, c
        if c.measured:
            assert c.policy_key == "sampling.alpha"


def test_openings_too_diverse_for_their_repeats_are_not_measured_never_a_pass() -> None:
    # Ten repeats, every baseline answer opening its own way: even a candidate answering one
    # opening every time could not be told apart, so the check says so instead of passing.
    rng = random.Random(10)
    pairs = [
        SampledPair.of(_request(0), replace(BASE, **_answer(rng, "primary", opening=f"b{i}"),
                                            **_answer(rng, "candidate", opening=f"c{i}")))
        for i in range(MIN_REPEATS)
    ]  # fmt: skip
    openings = next(c for c in sampled_checks(pairs, POLICY) if c.name == "sampled_openings")
    assert openings.outcome is Outcome.NOT_MEASURED
    assert "too few repeats" in openings.reason


@pytest.mark.parametrize("field", ["seed", "user", "stream", "stream_options"])
def test_a_repeated_request_is_the_same_body_but_for_seed_user_and_streaming(field: str) -> None:
    body = {"messages": [{"role": "user", "content": "hi"}], "temperature": 0.8}
    assert request_key({**body, field: 1}) == request_key(body)
    assert request_key({**body, "temperature": 0.9}) != request_key(body)


def test_the_proxys_window_keeps_the_latest_pairs_and_judges_them() -> None:
    window = SampledWindow(POLICY, size=40)
    assert window.judge()["status"] == "inconclusive"
    rng = random.Random(11)
    for pair in _pairs(rng, 30) + _pairs(rng, 30, opening="The city of"):
        window.add(_request(0), pair.comparison)  # one popular request, repeated
    judged = window.judge()
    assert (judged["pairs"], judged["pairs_seen"], judged["window"]) == (40, 60, 40)
    # the last 30 (greedy) pairs and 10 healthy ones: the openings give the candidate away
    assert judged["status"] == "fail"
    assert {c["name"]: c["outcome"] for c in judged["checks"]}["sampled_openings"] == "fail"
