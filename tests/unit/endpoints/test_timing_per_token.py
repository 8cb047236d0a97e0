"""Per-token ITL takes a shortcut when every chunk carried one token; the values must not change."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from servegate.endpoints.timing import itl_per_token_ms
from servegate.endpoints.types import Timing


def per_token_by_definition(timing: Timing) -> tuple[float, ...]:
    """Each chunk gap divided over the chunk's tokens (at least 1; 1 where no count was kept)."""
    stamps, counts = timing.token_chunk_ns, timing.token_chunk_tokens
    values: list[float] = []
    for i in range(1, len(stamps)):
        tokens = max(counts[i], 1) if i < len(counts) else 1
        values.extend([(stamps[i] - stamps[i - 1]) / 1e6 / tokens] * tokens)
    return tuple(values)


@settings(max_examples=50, deadline=None)
@given(
    st.lists(st.integers(0, 10**12), max_size=8),
    st.lists(st.integers(-1, 3), max_size=9),
    st.booleans(),
)
def test_per_token_itl_is_the_same_floats_whichever_way_it_is_computed(
    stamps: list[int], counts: list[int], ones: bool
) -> None:
    if ones:  # the usual stream: one token per chunk, the shortcut
        counts = [1] * len(stamps)
    timing = Timing(sent_ns=0, token_chunk_ns=tuple(stamps), token_chunk_tokens=tuple(counts))
    assert itl_per_token_ms(timing) == per_token_by_definition(timing)
