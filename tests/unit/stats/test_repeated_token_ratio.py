"""The proxy's repeated-token ratio: share of words (or CJK characters) repeating the one before."""

from __future__ import annotations

import pytest

from servegate.stats.degeneration import repeated_token_ratio


@pytest.mark.parametrize(
    ("text", "ratio"),
    [
        ("", 0.0),
        ("OK", 0.0),
        ("The answer is 4.", 0.0),
        ("the the the the", 0.75),
        (", , , , , , , ,", 7 / 8),
        ("好好好好", 0.75),
        (",,,,,,,,,,,,", 0.0),  # one word: a character run is the degeneration check's to catch
    ],
    ids=["empty", "one-word", "fluent", "stuck-word", "spaced-commas", "cjk", "comma-run"],
)
def test_repeated_token_ratio(text: str, ratio: float) -> None:
    assert repeated_token_ratio(text) == pytest.approx(ratio)
