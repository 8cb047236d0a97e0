"""The ASCII shortcut of the abnormal-character count gives what the per-character rule gives."""

from __future__ import annotations

import pytest

from servegate.stats.degeneration import degeneration_metrics


@pytest.mark.parametrize("code", range(128), ids=lambda c: f"U+{c:04X}")
def test_each_ascii_character_counts_as_abnormal_exactly_when_the_unicode_rule_says(
    code: int,
) -> None:
    ascii_text = "ab" + chr(code) + "cd"
    # the same text made non-ASCII with an ordinary letter: it takes the per-character rule
    unicode_text = ascii_text + "é"
    shortcut = degeneration_metrics(ascii_text).abnormal_char_ratio * len(ascii_text)
    per_char = degeneration_metrics(unicode_text).abnormal_char_ratio * len(unicode_text)
    assert round(shortcut) == round(per_char)
    assert round(shortcut) == (1 if (code < 32 or code == 127) and chr(code) not in "\t\n\r" else 0)
