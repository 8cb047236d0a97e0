"""One rule for server text in every report: control bytes, ANSI, surrogates shown, not acted on."""

from __future__ import annotations

import pytest

from servegate.endpoints.text import clip
from servegate.reports.plain import plain


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("OK", "OK"),
        ("a\nb\tc", "a\nb\tc"),
        ("\x1b[31mred", "\\x1b[31mred"),
        ("nul\x00", "nul\\x00"),
        ("csi\x9b", "csi\\x9b"),
        ("lone\udc80", "lone\\udc80"),
        ("rlo\u202e", "rlo\\u202e"),
        ("non\ufffe", "non\\ufffe"),
        ("中文", "中文"),
        (None, ""),
        (3.5, "3.5"),
    ],
    ids=["plain", "newline-tab", "ansi", "nul", "c1", "surrogate", "bidi", "nonchar", "cjk",
         "none", "number"],
)  # fmt: skip
def test_unprintable_characters_become_visible_escapes(raw: object, shown: str) -> None:
    assert plain(raw) == shown


def test_one_line_marks_newlines() -> None:
    assert plain("a\nb\r", one_line=True) == "a⏎b\\x0d"


def test_the_result_encodes_as_utf8() -> None:
    assert plain("x\udc80\ud800y").encode("utf-8") == b"x\\udc80\\ud800y"


def test_clip_says_how_much_was_cut() -> None:
    assert clip("abcdef", 4) == "abcd… (+2)"
    assert clip("abc", 4) == "abc"
