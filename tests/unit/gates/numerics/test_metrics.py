import math

import pytest

from servegate.endpoints.errors import ErrorCategory, RequestError
from servegate.endpoints.types import Completion, TokenLogprob
from servegate.gates.numerics.echo_route import ScoringRoute
from servegate.gates.numerics.noise import NoiseFloor, PathComparison
from servegate.gates.numerics.perplexity import (
    CrossScore,
    TextScore,
    perplexity_shift,
    same_tokens,
    tail_nll,
)
from servegate.gates.tokens import compare, cosine, margin_nats, non_finite
from servegate.stats.distribution import DistributionSummary

AS_IS = ScoringRoute("echo")


def tok(token: str, logprob: float, *alts: tuple[str, float]) -> TokenLogprob:
    return TokenLogprob(token, logprob, ((token, logprob), *alts))


HELLO = (tok("Hello", -0.1, ("Hi", -2.5)), tok(" world", -0.2, (" there", -1.9)))


def test_identical_sequences_have_no_divergence_and_no_drift() -> None:
    cmp = compare("p", HELLO, HELLO)
    assert cmp.exact
    assert cmp.mean_abs_dlogprob == 0.0
    assert cmp.topk_jaccard == 1.0


def test_drift_on_the_common_prefix_is_the_mean_absolute_logprob_difference() -> None:
    drifted = (tok("Hello", -0.15, ("Hi", -2.4)), tok(" world", -0.3, (" there", -1.8)))
    cmp = compare("p", HELLO, drifted)
    assert cmp.mean_abs_dlogprob == pytest.approx(0.075)
    assert cmp.max_abs_dlogprob == pytest.approx(0.1)


def test_a_flip_to_the_baselines_second_choice_is_measured_by_its_gap() -> None:
    base = (tok("Yes", -0.6, ("No", -0.8)),)
    cand = (tok("No", -0.7, ("Yes", -0.75)),)
    cmp = compare("p", base, cand)
    assert cmp.first_divergence == 0
    assert cmp.gap_nats == pytest.approx(0.2)
    assert cmp.margin_nats == pytest.approx(0.2)
    assert cmp.b_token_in_top is True


def test_a_token_outside_the_baselines_top_k_gets_a_lower_bound_gap() -> None:
    base = (tok("OK", -0.01, ("Ok", -5.0), ("ok", -6.0)),)
    cand = (tok(",", -0.01),)
    cmp = compare("p", base, cand)
    assert cmp.b_token_in_top is False
    assert cmp.gap_nats == pytest.approx(5.99)


def test_a_side_that_stops_early_diverges_at_its_length_without_a_gap() -> None:
    cmp = compare("p", HELLO, HELLO[:1])
    assert cmp.first_divergence == 1
    assert cmp.gap_nats is None


def test_margin_needs_two_alternatives() -> None:
    assert margin_nats(TokenLogprob("a", -0.1)) is None
    assert margin_nats(tok("a", -0.1, ("b", -0.4))) == pytest.approx(0.3)


def test_degenerate_text_has_far_higher_nll_than_fluent_text() -> None:
    context = [None, TokenLogprob("Say", -3.0)]
    fluent = [*context, TokenLogprob(" OK", -0.2)]
    commas = [*context, *(TokenLogprob(",", -9.0) for _ in range(8))]
    fluent_nll, _ = tail_nll(fluent, " OK")
    comma_nll, _ = tail_nll(commas, ",,,,,,,,")
    assert fluent_nll == pytest.approx(0.2)
    assert comma_nll == pytest.approx(9.0)


def test_tail_nll_is_unknown_when_the_text_reaches_the_unscored_first_token() -> None:
    assert tail_nll([None, TokenLogprob("b", -1.0)], "ab") == (None, False)
    assert tail_nll(None, "x") == (None, False)


@pytest.mark.parametrize(
    ("completion", "expected"),
    [
        (Completion(status=200, content="x", logprobs=HELLO), False),
        (Completion(status=200, content="x", logprobs=(TokenLogprob("x", math.nan),)), True),
        (Completion(status=200, content="x", logprobs=(tok("x", -0.1, ("y", math.inf)),)), True),
        (
            Completion(
                status=200, error=RequestError(ErrorCategory.NON_FINITE_LOGPROB, "NaN at token 3")
            ),
            True,
        ),
        (Completion(status=500, error=RequestError(ErrorCategory.SERVER, "boom")), False),
    ],
    ids=["finite", "nan-logprob", "inf-in-top-k", "client-flagged", "other-error"],
)
def test_non_finite_logprobs_are_detected_wherever_they_are(
    completion: Completion, expected: bool
) -> None:
    assert non_finite(completion) is expected


def test_cosine_of_parallel_vectors_is_one_and_of_mismatched_dimensions_zero() -> None:
    assert cosine((1.0, 2.0), (2.0, 4.0)) == pytest.approx(1.0)
    assert cosine((1.0, 0.0), (0.0, 1.0)) == pytest.approx(0.0)
    assert cosine((1.0,), (1.0, 0.0)) == 0.0


def test_an_unmeasured_floor_says_so_and_contributes_nothing() -> None:
    floor = NoiseFloor.zero()
    assert not floor.measured
    assert floor.flip_rate() is None
    assert floor.mean_abs_dlogprob() is None
    assert floor.metrics()["aa_source"] == "none"
    assert floor.exact_match_rate is None


def test_the_floor_reports_each_path_of_the_baseline_separately() -> None:
    same = compare("p", HELLO, HELLO)
    flipped = compare("p", (tok("Yes", -0.3, ("No", -1.5)),), (tok("No", -0.4, ("Yes", -1.2)),))
    floor = NoiseFloor(
        (PathComparison("repeat", same), PathComparison("cache-hit", flipped)),
        DistributionSummary.from_values(()),
    )
    assert floor.source == "repeat+cache-hit"
    assert (floor.flip_rate("repeat"), floor.flip_rate("cache-hit"), floor.flip_rate()) == (
        0.0, 1.0, 0.5,
    )  # fmt: skip
    assert floor.tie_gap_nats() == pytest.approx(1.2)
    assert floor.metrics()["aa_cache_hit_flip_rate"] == 1.0


def test_cross_scores_name_who_scored_whose_text() -> None:
    cs = CrossScore(
        baseline_on_baseline=0.4, baseline_on_candidate=8.7,
        candidate_on_candidate=0.1, candidate_on_baseline=6.0,
    )  # fmt: skip
    assert cs.excess_nats == pytest.approx(8.3)  # the baseline finds the candidate's text unlikely
    assert cs.teacher_forced_dnll_nats == pytest.approx(
        5.6
    )  # the candidate mispredicts the baseline


def _echo(*entries: TokenLogprob | None) -> Completion:
    return Completion(status=200, content="", prompt_logprobs=entries)


def test_teacher_forced_flips_count_positions_whose_top_1_differs() -> None:
    base = _echo(None, tok("a", -0.1, ("b", -2.0)), tok("c", -0.5, ("d", -1.0)))
    cand = _echo(None, tok("a", -0.3, ("b", -2.0)), tok("c", -1.2, ("d", -0.7)))  # "d" wins
    result = perplexity_shift([TextScore("t", base, cand)], AS_IS, AS_IS)
    assert result.argmax_flip_rate == pytest.approx(0.5)
    assert result.mean_abs_dlogprob == pytest.approx((0.2 + 0.7) / 2)
    assert result.shift.mean == pytest.approx(0.45)
    assert result.texts_compared == ("t",)


def test_texts_a_side_did_not_score_are_named() -> None:
    base = _echo(None, tok("a", -0.1))
    failed = Completion(status=500, error=RequestError(ErrorCategory.SERVER, "boom"))
    result = perplexity_shift([TextScore("t", base, failed)], AS_IS, AS_IS)
    assert (result.texts_unscored, result.shift.n) == (("t",), 0)


def test_partial_utf8_tokens_written_differently_by_two_engines_are_the_same_tokens() -> None:
    # Measured 2026-12-02, llama.cpp → vLLM, the Chinese reference text (426 tokens on each
    # side): llama-cpp-python echoes "", "", "是", "", "", "", … where vLLM writes "", "", "是",
    # "", "世", "", "", "界", … (the character on the token that completes it). The same 2,959
    # tokens of the joined text were called "tokenized differently".
    base = _echo(None, tok("", -1.0), tok("", -2.0), tok("是", -0.5), tok(" a", -0.1))
    cand = _echo(None, tok("", -1.5), tok("世", -2.0), tok("是", -0.5), tok(" a", -0.1))
    result = perplexity_shift([TextScore("zh", base, cand)], AS_IS, AS_IS)
    assert result.texts_compared == ("zh",)
    assert result.shift.mean == pytest.approx(0.5 / 4)
    assert same_tokens(["", " "], ["\ufffd", " \ufffd"])  # U+FFFD for the partial bytes
    assert same_tokens(["", " "], ["", " 世"])
    assert not same_tokens([" a", "b"], [" ab", ""])  # ASCII tokens must be equal
    assert not same_tokens(["", "是"], ["是"])  # another number of tokens
    other = _echo(None, tok("", -1.5), tok("世", -2.0), tok("是", -0.5), tok(" b", -0.1))
    result = perplexity_shift([TextScore("zh", base, other)], AS_IS, AS_IS)
    assert result.texts_tokenized_differently == ("zh",)
