"""What the sampling gate sends: kept sets clear of their boundaries, and the requests."""

from __future__ import annotations

import pytest

from servegate.gates.sampling.plan import (
    NEUTRALS,
    Kind,
    Reported,
    SamplingPlan,
    kept,
    reference_cells,
    tempered_cells,
    truncation_cells,
    truncation_value,
)

REPORT = Reported(("The", "A", "One", "1", "I"), (0.42, 0.15, 0.05, 0.03, 0.02))


@pytest.mark.parametrize(
    ("kind", "value", "expected"),
    [
        (Kind.TOP_K, 2, ("The", "A")),
        (Kind.TOP_P, 0.50, ("The", "A")),  # 0.42 < 0.50 ≤ 0.57
        (Kind.MIN_P, 0.20, ("The", "A")),  # 0.084: keeps 0.15, drops 0.05
        (Kind.TOP_P, 0.43, None),  # within 0.03 of 0.42: a drifting report could move it
        (Kind.TOP_K, 5, None),  # reaches past the reported tokens
        (Kind.MIN_P, 0.12, None),  # 0.0504 is a hair above the third token's 0.05
    ],
)
def test_a_kept_set_is_named_only_when_every_token_is_clear_of_the_boundary(
    kind: Kind, value: float, expected: tuple[str, ...] | None
) -> None:
    assert kept(REPORT, kind, value) == expected


@pytest.mark.parametrize("kind", [Kind.TOP_P, Kind.TOP_K, Kind.MIN_P])
def test_the_chosen_value_keeps_the_smallest_clear_set(kind: Kind) -> None:
    value = truncation_value(REPORT, kind)
    assert value is not None
    assert kept(REPORT, kind, value) == ("The", "A")


def test_a_flat_report_gives_no_clear_set() -> None:
    flat = Reported(tuple("abcdef"), (0.1, 0.099, 0.098, 0.097, 0.096, 0.095))
    assert truncation_value(flat, Kind.TOP_K) is None
    assert truncation_value(flat, Kind.MIN_P) is None


def test_the_cells_ask_max_tokens_1_with_top_logprobs_and_each_side_s_neutral_sampler() -> None:
    plan = SamplingPlan()
    first = reference_cells(plan)
    assert [c.draws for c in first] == [plan.reference_draws] * len(plan.prompts)
    body = first[0].request(NEUTRALS[0])
    assert body["max_tokens"] == 1
    assert body["temperature"] == 1.0
    assert body["top_logprobs"] == 20
    assert body["top_k"] == 0
    assert first[0].request(NEUTRALS[-1]).keys().isdisjoint({"top_k", "min_p"})
    assert {c.temperature for c in tempered_cells(plan)} == {0.5, 1.5}


def test_truncation_cells_use_the_first_prompts_with_a_clear_set_and_put_the_value_in() -> None:
    plan = SamplingPlan(truncation_prompts=1)
    cells = truncation_cells(plan, {"coin": REPORT, "weekday": REPORT})
    assert [(c.prompt_id, c.kind) for c in cells] == [
        ("coin", Kind.TOP_P), ("coin", Kind.TOP_K), ("coin", Kind.MIN_P),
    ]  # fmt: skip
    top_k = next(c for c in cells if c.kind is Kind.TOP_K)
    assert top_k.request(NEUTRALS[0])["top_k"] == 2


def test_a_plan_without_draws_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one draw"):
        SamplingPlan(reference_draws=0)


def test_a_scaled_plan_keeps_every_check_on_fewer_draws() -> None:
    whole = SamplingPlan()
    half = whole.scaled(0.5)
    assert (half.reference_draws, half.tempered_draws, half.truncation_draws) == (48, 24, 24)
    assert (half.penalty_draws, half.bias_draws, half.production_repeats) == (10, 12, 10)
    assert (half.prompts, half.temperatures, half.seeds) == (
        whole.prompts, whole.temperatures, whole.seeds,
    )  # fmt: skip
    assert whole.scaled(1.0) == whole
    tiny = whole.scaled(0.01)
    assert (tiny.reference_draws, tiny.truncation_draws) == (3, 24)
    # The penalty checks' answers and production's repeats stay whole: with 3 answers the
    # stripped penalties passed where 10 fail them (benchmarks/RESULTS-sampling.md).
    assert (tiny.penalty_draws, tiny.production_repeats) == (10, 10)
    assert SamplingPlan(bias_draws=0, penalty_draws=2).scaled(0.5).bias_draws == 0


@pytest.mark.parametrize("share", [0.0, -0.5, 1.5])
def test_a_share_outside_0_to_1_is_refused(share: float) -> None:
    with pytest.raises(ValueError, match="share must be in"):
        SamplingPlan().scaled(share)
