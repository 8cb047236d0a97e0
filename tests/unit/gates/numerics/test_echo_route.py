"""The prompt-scoring instrument: measured against generation logprobs, calibrated, or refused."""

import pytest

from servegate.endpoints.types import Completion, TokenLogprob
from servegate.gates.numerics.echo_route import choose, measure, realign
from servegate.gates.numerics.perplexity import token_nlls

# A greedy continuation " Paris." of "The capital of France is", with generation logprobs.
GEN = (TokenLogprob(" Paris", -0.4, ((" Paris", -0.4),)), TokenLogprob(".", -0.9, ((".", -0.9),)))
PROMPT = ("The", " capital", " of", " France", " is")
NEXT = {" is": (" Paris", -0.4), " Paris": (".", -0.9), ".": ("\n", -1.1)}


def generated() -> Completion:
    return Completion(status=200, content=" Paris.", logprobs=GEN)


def aligned_echo() -> Completion:
    """Entry i: token i, its logprob given tokens < i, the top-k over token i (as OpenAI)."""
    values = {" Paris": -0.4, ".": -0.9}
    entries: list[TokenLogprob | None] = [None]
    for tok in (*PROMPT[1:], " Paris", "."):
        lp = values.get(tok, -2.0)
        entries.append(TokenLogprob(tok, lp, ((tok, lp),)))
    return Completion(status=200, content="", prompt_logprobs=tuple(entries))


def late_echo() -> Completion:
    """Stock llama-cpp-python on a model without BOS: entry i carries token i with the logits that
    predict token i+1 — its value belongs to no real question, its top-k to the next position."""
    entries: list[TokenLogprob | None] = [None]
    for tok in (*PROMPT[1:], " Paris", "."):
        nxt = NEXT.get(tok, ("x", -2.0))
        entries.append(TokenLogprob(tok, -13.7, (nxt, (tok, -13.7))))
    entries[1] = TokenLogprob(" capital", -13.7, ((" of", -2.0),))
    return Completion(status=200, content="", prompt_logprobs=tuple(entries))


def test_an_aligned_echo_is_read_as_returned() -> None:
    check = measure(generated(), aligned_echo())
    assert check.errors_nats[0] == pytest.approx(0.0)
    route = choose(check, 0.1)
    assert (route.name, route.shift) == ("echo", 0)
    assert route.describe().startswith("echo as returned")


def test_a_late_echo_is_calibrated_by_a_one_token_shift() -> None:
    check = measure(generated(), late_echo())
    assert check.errors_nats[0] == pytest.approx((13.3 + 12.8) / 2)
    assert check.errors_nats[1] == pytest.approx(0.0)
    route = choose(check, 0.1)
    assert (route.name, route.shift) == ("echo-shifted", 1)
    assert "aligned after a one-token shift" in route.describe()


def test_nothing_aligns_then_no_route_with_the_measured_errors() -> None:
    garbage = Completion(
        status=200,
        content="",
        prompt_logprobs=(
            None,
            *(TokenLogprob(t, -7.0, ((t, -7.0),)) for t in (*PROMPT[1:], " Paris", ".")),
        ),
    )
    route = choose(measure(generated(), garbage), 0.1)
    assert route.name == "none"
    assert route.offered
    assert "not aligned by any shift" in route.reason
    assert token_nlls(garbage, route) is None  # no consumer reads it


@pytest.mark.parametrize(
    ("echo", "why"),
    [
        (
            Completion(status=200, content="", prompt_logprobs=(None, TokenLogprob(".", -1.0))),
            "wrong length",
        ),
        (
            Completion(
                status=200,
                content="",
                prompt_logprobs=(
                    None,
                    TokenLogprob("a", -1.0),
                    TokenLogprob("b", -1.0),
                    TokenLogprob("c", -1.0),
                ),
            ),
            "re-tokenizes differently",
        ),
    ],
    ids=["wrong-length", "wrong-tokens"],
)
def test_a_garbage_echo_is_not_measured_with_a_one_line_reason(echo: Completion, why: str) -> None:
    check = measure(generated(), echo)
    route = choose(check, 0.1)
    assert route.name == "none"
    assert route.offered
    assert why in route.reason
    assert "\n" not in route.reason


def test_a_server_that_returns_no_echo_logprobs_does_not_offer_them() -> None:
    route = choose(measure(generated(), Completion(status=200, content="x")), 0.1)
    assert (route.name, route.offered) == ("none", False)


def test_a_bound_ignores_the_echoed_tokens_own_value_below_the_top_k() -> None:
    # Stock llama-cpp-python's top dict at a position: its top-5 plus the echoed token's own
    # value, here far below them (-11.2). A token missing from the dict can have at most the
    # 5th largest (-3.69), not -11.2: with the lowest value the "bound" was 7.5 nats too low,
    # and a flash-attention candidate failed cross-scoring on an NLL "at least" 1.3 nats worse.
    top = ((" is", -0.43), (",", -2.48), (" lies", -2.55), (" and", -3.68), (")", -3.69),
           (" France", -11.2))  # fmt: skip
    entries = (None, TokenLogprob(" France", -11.2, top), TokenLogprob(" borders", -9.0, ()))
    out, bounded = realign(entries, 1)
    assert out[2] is not None
    assert out[2].logprob == -3.69
    assert bounded == frozenset({2})


def test_the_shift_scores_a_token_outside_the_previous_top_k_only_as_a_bound() -> None:
    entries = (
        None,
        TokenLogprob("a", -9.0, (("b", -0.5), ("c", -2.0))),
        TokenLogprob("z", -9.0, ()),
    )
    out, bounded = realign(entries, 1)
    assert out[2] is not None
    assert out[2].logprob == -2.0
    assert bounded == frozenset({2})


def test_a_long_echo_gets_a_deadline_scaled_to_the_slower_sides_measured_rate() -> None:
    from servegate.gates.numerics.echo_route import EchoCheck
    from servegate.gates.numerics.perplexity import scoring_deadline_s

    # Stock llama-cpp-python echoed 40 characters in 1.3 s (it sorts the vocabulary per token):
    # the 13,000-character reference text needs minutes, not the 60 s chat deadline.
    slow = EchoCheck(offered=True, errors_nats={0: 13.7, 1: 0.0}, seconds_per_char=1.3 / 40)
    fast = EchoCheck(offered=True, errors_nats={0: 0.0}, seconds_per_char=0.001)
    assert scoring_deadline_s((fast, slow), 13_000, 60.0, 3.0, 1800.0) == pytest.approx(1267.5)
    assert scoring_deadline_s((fast,), 13_000, 60.0, 3.0, 1800.0) == 60.0  # never below
    assert scoring_deadline_s((slow,), 100_000, 60.0, 3.0, 1800.0) == 1800.0  # never above
    assert scoring_deadline_s((EchoCheck.not_offered("x"),), 13_000, 60.0, 3.0, 1800.0) == 60.0


def test_the_shift_is_reported_by_position_bucket() -> None:
    from servegate.gates.numerics.echo_route import ScoringRoute
    from servegate.gates.numerics.perplexity import TextScore, perplexity_shift

    def echo(nll_at: list[float]) -> Completion:
        entries = (
            None,
            *(TokenLogprob(f" w{i}", -x, ((f" w{i}", -x),)) for i, x in enumerate(nll_at)),
        )
        return Completion(status=200, content="", prompt_logprobs=entries)

    n = 1500
    base = [1.0] * n
    # a KV-cache error that grows with the position: nothing early, +0.2 nats late
    cand = [1.0 + (0.2 if i >= 1024 else 0.0) for i in range(n)]
    result = perplexity_shift(
        [TextScore("long", echo(base), echo(cand))], ScoringRoute("echo"), ScoringRoute("echo")
    )
    buckets = {label: (tokens, round(mean, 3)) for label, tokens, mean in result.by_position}
    assert buckets == {"0–255": (255, 0.0), "256–1023": (768, 0.0), "1024–4095": (477, 0.2)}


def test_a_token_whose_string_names_no_single_token_is_only_a_bound() -> None:
    # Measured 2026-12-02 on stock llama-cpp-python 0.3.36 (ja-encyclopedia, 195 positions): 156
    # prompt tokens are partial UTF-8 bytes whose string is "", and the dict's "" key held the
    # echoed token's own misaligned value (mean NLL 12.9 nats where the exact positions read 1.7):
    # the perplexity of a logit-scale candidate read −0.33 nats/token *better* (truth: +0.07).
    top = (("a", -0.5), ("", -13.1))
    entries = (None, TokenLogprob("", -13.1, top), TokenLogprob("", -9.0, top),
               TokenLogprob("\ufffd", -9.0, ()))  # fmt: skip
    out, bounded = realign(entries, 1)
    assert bounded == frozenset({2, 3})
    assert out[2] is not None
    assert out[2].logprob == -0.5  # at most the largest shown, never the "" key's value
