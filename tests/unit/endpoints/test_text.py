"""Intake of server text: surrogates and excerpts."""

from __future__ import annotations

import pytest

from servegate.endpoints.text import clean_surrogates, excerpt


@pytest.mark.parametrize(
    ("raw", "clean", "flagged"),
    [
        ("plain", "plain", False),
        ("a\ud800b", "a\ufffdb", True),
        ("\udfff", "\ufffd", True),
        ("\ud83d\ude00", "\U0001f600", False),
        ("\ud83d\ude00\ud83d", "\U0001f600\ufffd", True),
    ],
    ids=["plain", "lone-high", "lone-low", "split-pair", "pair-then-lone"],
)
def test_lone_surrogates_are_replaced_and_pairs_joined(raw: str, clean: str, flagged: bool) -> None:
    assert clean_surrogates(raw) == (clean, flagged)
    clean.encode("utf-8")


def test_excerpt_escapes_control_characters_and_marks_the_cut() -> None:
    text = excerpt(b"\x00\x1b[31mred\r\n" + b"x" * 500, limit=20)
    assert text.startswith("\\x00\\x1b[31mred")
    assert "\x1b" not in text
    assert text.endswith("…")


def test_excerpt_survives_invalid_utf8() -> None:
    assert excerpt(b"ok\xff") == "ok\ufffd"
