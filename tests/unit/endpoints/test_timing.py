"""Derived timing metrics (DESIGN.md definitions) on plain Timing values."""

from __future__ import annotations

import pytest

from servegate.endpoints.timing import (
    is_buffered,
    itl_per_chunk_ms,
    itl_per_token_ms,
    output_tokens,
    tpot_ms,
)
from servegate.endpoints.types import Completion, Timing, TokenLogprob, Usage

MS = 1_000_000


def timing(*chunks: tuple[int, int], sent_ms: int = 0) -> Timing:
    return Timing(
        sent_ns=sent_ms * MS,
        token_chunk_ns=tuple(t * MS for t, _ in chunks),
        token_chunk_tokens=tuple(n for _, n in chunks),
    )


def test_ttft_e2el_itl_and_tpot_follow_the_definitions() -> None:
    t = timing((100, 1), (120, 1), (160, 2), (170, 1))
    assert (t.ttft_ms, t.e2el_ms) == (100, 170)
    assert itl_per_chunk_ms(t) == (20, 40, 10)
    assert itl_per_token_ms(t) == (20, 20, 20, 10)
    assert tpot_ms(t) == pytest.approx(70 / 4)
    assert tpot_ms(t, output_tokens=8) == pytest.approx(10)


def test_tpot_needs_two_tokens() -> None:
    assert tpot_ms(timing((100, 1))) is None


@pytest.mark.parametrize(
    ("chunks", "buffered"),
    [
        (((1000, 1), (1000, 1), (1000, 1)), True),
        (((100, 1), (120, 1), (140, 1)), False),
        (((1000, 1),), False),
        (((5000, 1), (5100, 1), (5200, 1)), False),
    ],
    ids=["all-at-once", "spaced", "single-chunk", "long-prefill-then-spaced"],
)
def test_buffered_stream_is_ttft_close_to_e2el_with_no_gaps(
    chunks: tuple[tuple[int, int], ...], buffered: bool
) -> None:
    assert is_buffered(timing(*chunks)) is buffered


def test_output_tokens_prefer_usage_then_logprobs_then_estimate() -> None:
    t = timing((1, 1), (2, 1), (3, 1))
    lp = (TokenLogprob("a", -1.0), TokenLogprob("b", -1.0))
    assert output_tokens(Completion(200, usage=Usage(completion_tokens=7), timing=t)) == (
        7,
        "usage",
    )
    assert output_tokens(Completion(200, logprobs=lp, timing=t)) == (2, "logprobs")
    assert output_tokens(Completion(200, timing=t)) == (3, "estimated")
    assert output_tokens(Completion(200)) == (None, "estimated")
