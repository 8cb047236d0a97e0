"""The degeneration metrics' C-loop shortcuts (ASCII bytes, token streaks, n-grams by zip) give
exactly what the per-character and per-token rules give, on texts full of runs and repeats."""

from __future__ import annotations

import unicodedata

from hypothesis import given, settings
from hypothesis import strategies as st

from servegate.stats.degeneration import (
    _TOKEN,
    NGRAM,
    DegenerationMetrics,
    degeneration_metrics,
)


def longest_run(items: list[str]) -> tuple[int, str]:
    best, best_item, run, prev = 0, "", 0, None
    for item in items:
        run = run + 1 if item == prev else 1
        prev = item
        if run > best:
            best, best_item = run, item
    return best, best_item


def abnormal(ch: str) -> bool:
    if ch in "\n\r\t":
        return False
    return ch == "\ufffd" or unicodedata.category(ch) in {"Cc", "Cf", "Co", "Cn", "Cs"}


def by_definition(text: str) -> DegenerationMetrics:
    """The metrics computed one character and one token at a time."""
    visible = [c for c in text if not c.isspace()]
    char_run, char = longest_run(visible)
    tokens = _TOKEN.findall(text)
    grams = [tuple(tokens[i : i + NGRAM]) for i in range(len(tokens) - NGRAM + 1)]
    return DegenerationMetrics(
        length=len(text),
        longest_char_run=char_run,
        longest_char_run_char=char,
        longest_token_run=longest_run(tokens)[0],
        abnormal_char_ratio=sum(map(abnormal, text)) / len(text) if text else 0.0,
        repeated_ngram_ratio=1.0 - len(set(grams)) / len(grams)
        if len(tokens) >= NGRAM + 1
        else 0.0,
        symbol_ratio=sum(not c.isalnum() for c in visible) / len(visible) if visible else 0.0,
        empty=not text.strip(),
    )


PIECE = st.one_of(
    st.sampled_from([" ", "\t", "\n", "\x0b", "\x0c", "\r", "\x1c", "\x1f", "\x00", "\x7f"]),
    st.sampled_from(["a", "b", "!", ",", "0", " tok", " the", "é", "世", "\u2028", "\ufffd"]),
    st.text(alphabet=st.characters(max_codepoint=127), max_size=4),
    st.text(max_size=3),
)
TEXT = st.lists(st.tuples(PIECE, st.integers(1, 30)), max_size=12).map(
    lambda parts: "".join(piece * times for piece, times in parts)
)


@settings(max_examples=150, deadline=None)
@given(TEXT, st.booleans())
def test_the_metrics_are_what_the_per_character_rules_give(text: str, ascii_only: bool) -> None:
    if ascii_only:
        text = text.encode("ascii", "ignore").decode("ascii")
    assert degeneration_metrics(text) == by_definition(text)
