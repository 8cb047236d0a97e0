"""Penalties judged token by token against the side's own raw logprobs (plain data)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from servegate.endpoints.types import Completion, TokenLogprob
from servegate.gates.sampling.penalties import (
    PenaltyReading,
    answer_deficit,
    deficit,
    judge,
)

VOCAB = [f"w{i}" for i in range(40)]
RAW = np.array([1.0 / (i + 1) for i in range(40)])
RAW /= RAW.sum()


def answer(rng: np.random.Generator, penalty: float, tokens: int = 32) -> Completion:
    """Sampled from RAW with every token already drawn `penalty` times less likely; the report
    is always RAW (raw logprobs)."""
    seen: set[int] = set()
    entries = []
    top = tuple((VOCAB[i], math.log(RAW[i])) for i in range(20))
    for _ in range(tokens):
        w = RAW.copy()
        for i in seen:
            w[i] /= penalty
        w /= w.sum()
        i = int(rng.choice(len(w), p=w))
        entries.append(TokenLogprob(VOCAB[i], math.log(RAW[i]), top))
        seen.add(i)
    return Completion(status=200, content=" ".join(e.token for e in entries),
                      logprobs=tuple(entries))  # fmt: skip


def answers(seed: int, penalty: float, k: int = 10) -> list[Completion]:
    rng = np.random.default_rng(seed)
    return [answer(rng, penalty) for _ in range(k)]


def test_the_deficit_of_one_answer_is_repeats_drawn_minus_repeats_expected() -> None:
    top = (("a", math.log(0.5)), ("b", math.log(0.3)), ("c", math.log(0.2)))
    tokens = [TokenLogprob("a", 0.0, top), TokenLogprob("a", 0.0, top), TokenLogprob("b", 0.0, top)]
    total, count = answer_deficit(tokens)
    # position 2: "a" seen, q = 0.5, drawn a repeat: +0.5; position 3: q = 0.5, not: -0.5
    assert count == 2
    assert total == pytest.approx(0.0)


def test_draws_that_follow_their_report_have_no_deficit() -> None:
    found = deficit(answers(1, penalty=1.0, k=40))
    assert found is not None
    assert abs(found.z) < 3


def test_a_penalty_makes_repeats_rarer_than_the_raw_report_says() -> None:
    found = deficit(answers(2, penalty=4.0))
    assert found is not None
    assert found.mean < 0
    assert found.z < -5


def test_a_candidate_whose_penalty_does_nothing_fails_where_the_baseline_s_works() -> None:
    reading = PenaltyReading(deficit(answers(3, 4.0)), deficit(answers(4, 1.0)))
    failed, _, candidate, limit, reason = judge(reading, None, "presence", 0.001 / 3)
    assert failed is True
    assert "does not act" in reason
    assert "repeat deficit" in candidate
    assert "detected with probability" in limit


def test_a_candidate_whose_penalty_acts_like_the_baseline_s_passes() -> None:
    reading = PenaltyReading(deficit(answers(5, 4.0)), deficit(answers(6, 4.0)))
    failed, *_ = judge(reading, None, "presence", 0.001 / 3)
    assert failed is False


def test_a_baseline_whose_penalty_shows_no_effect_leaves_the_check_unmeasured() -> None:
    reading = PenaltyReading(deficit(answers(7, 1.0)), deficit(answers(8, 1.0)))
    failed, *_, reason = judge(reading, None, "frequency", 0.001 / 3)
    assert failed is None
    assert "shows no effect" in reason


def test_a_baseline_whose_logprobs_miss_its_unpenalised_draws_leaves_the_check_unmeasured() -> None:
    # Without a penalty its draws repeat less than its logprobs say: they are not the raw report.
    control = PenaltyReading(deficit(answers(9, 4.0)), deficit(answers(10, 1.0)))
    reading = PenaltyReading(deficit(answers(11, 4.0)), deficit(answers(12, 1.0)))
    failed, *_, reason = judge(reading, control, "presence", 0.001 / 3)
    assert failed is None
    assert "not the raw report" in reason


def test_the_power_against_a_stripped_penalty_uses_the_spread_of_unpenalised_answers() -> None:
    # vLLM's penalties-stripped-2: a check stated at 0.96 missed, the stripped candidate's
    # answers spreading twice as wide as the baseline's penalised ones (0.017 against 0.008).
    from servegate.gates.sampling.penalties import Deficit

    penalised = Deficit(-0.06, 0.008, 300, 10)
    unpenalised = Deficit(0.0, 0.017, 300, 10)
    reading = PenaltyReading(penalised, Deficit(0.0, 0.017, 300, 10))
    level = 0.001 / 3
    narrow = reading.stripped_power(level)
    wide = reading.stripped_power(level, unpenalised)
    assert narrow is not None
    assert wide is not None
    assert narrow > 0.95 > wide
    # the stated power is the share of such candidates the test fails (normal model, 20,000 draws)
    rng = np.random.default_rng(5)
    spread = math.hypot(penalised.stderr, unpenalised.stderr)
    from statistics import NormalDist

    critical = NormalDist().inv_cdf(1 - level)
    c = rng.normal(0.0, unpenalised.stderr, 20_000)
    b = rng.normal(penalised.mean, penalised.stderr, 20_000)
    detected = float(np.mean((c - b) / spread > critical))
    assert abs(detected - wide) < 0.05, (detected, wide)
