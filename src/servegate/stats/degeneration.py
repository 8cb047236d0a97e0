"""Degeneration metrics on generated text: the signatures of a model that broke, not one that erred.

`!!!!!!!!!!!!!!!!` (vLLM 0.25.0) and `,,,,,,,,,,,,,,,,` (our mixed-dtype engine) are long runs of
one character; a looping decoder shows as repeated n-grams; mojibake or control bytes as abnormal
characters.
"""

from __future__ import annotations

import itertools
import operator
import re
import unicodedata
from dataclasses import dataclass

# Whitespace-separated words, or single CJK characters (which carry no spaces between "tokens").
_TOKEN = re.compile(
    r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]|[^\s\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]+"
)

# Defaults chosen so fluent text in any script never trips them, while a stuck decoder always does.
SEVERE_CHAR_RUN = 12
SEVERE_TOKEN_RUN = 8
SEVERE_ABNORMAL_RATIO = 0.3
SEVERE_REPEATED_NGRAM_RATIO = 0.6
NGRAM = 3
SOUP_SYMBOL_RATIO = 0.5
SOUP_BASELINE_MAX = 0.25


@dataclass(frozen=True, slots=True)
class DegenerationMetrics:
    """How degenerate one text is. Ratios are in [0, 1]; runs are counts."""

    length: int
    longest_char_run: int
    longest_char_run_char: str
    longest_token_run: int
    abnormal_char_ratio: float
    repeated_ngram_ratio: float
    symbol_ratio: float  # share of non-space characters that are neither letters nor digits
    empty: bool


def _longest_run(items: list[str]) -> tuple[int, str]:
    best, best_item, run, prev = 0, "", 0, None
    for item in items:
        run = run + 1 if item == prev else 1
        prev = item
        if run > best:
            best, best_item = run, item
    return best, best_item


# What _is_abnormal counts among ASCII characters: controls (Cc) but TAB, LF and CR.
_ASCII_ABNORMAL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def _is_abnormal(ch: str) -> bool:
    # Replacement characters, private-use, unassigned, surrogates and control characters other than
    # ordinary whitespace are what broken decoding produces; punctuation runs are caught by runs.
    if ch in "\n\r\t":
        return False
    if ch == "\ufffd":
        return True
    return unicodedata.category(ch) in {"Cc", "Cf", "Co", "Cn", "Cs"}


def _repeated_ngram_ratio(tokens: list[str], n: int) -> float:
    if len(tokens) < n + 1:
        return 0.0
    # each run of n tokens as a tuple; the shorter tails end the zip
    grams = list(zip(*(tokens[i:] for i in range(n)), strict=False))
    return 1.0 - len(set(grams)) / len(grams)


# ASCII shortcuts (the usual answer, checked under load for every request): the same values as
# the per-character rules, computed by C loops over bytes.
_ASCII_SPACE = bytes(c for c in range(128) if chr(c).isspace())
_ASCII_NOT_ALNUM = bytes(c for c in range(128) if not chr(c).isalnum())
_REPEAT = re.compile(rb"(.)\1+", re.DOTALL)  # a maximal run of one byte, two or more long


def _ascii_char_run(visible: bytes) -> tuple[int, str]:
    """`_longest_run` over the characters of ASCII `visible`: the first longest run and its
    character (any run is at least 1 long, so only repeats can beat the first character)."""
    best, at = (1, 0) if visible else (0, -1)
    for match in _REPEAT.finditer(visible):
        size = match.end() - match.start()
        if size > best:
            best, at = size, match.start()
    return best, chr(visible[at]) if at >= 0 else ""


def _longest_token_run(tokens: list[str]) -> int:
    """`_longest_run(tokens)[0]`: the longest streak of equal neighbours, plus one."""
    if not tokens:
        return 0
    same = bytes(map(operator.eq, tokens, tokens[1:]))  # 1 where a token repeats the last
    return max(map(len, same.split(b"\x00"))) + 1


def degeneration_metrics(text: str) -> DegenerationMetrics:
    """Compute every degeneration metric of one generated text."""
    stripped = text.strip()
    tokens = _TOKEN.findall(text)
    token_run = _longest_token_run(tokens)
    if text.isascii():
        visible_bytes = text.encode("ascii").translate(None, _ASCII_SPACE)
        char_run, char = _ascii_char_run(visible_bytes)
        abnormal = len(_ASCII_ABNORMAL.findall(text))
        visible_count = len(visible_bytes)
        symbols = visible_count - len(visible_bytes.translate(None, _ASCII_NOT_ALNUM))
    else:
        visible = [c for c in text if not c.isspace()]
        char_run, char = _longest_run(visible)
        abnormal = sum(1 for c in text if _is_abnormal(c))
        visible_count = len(visible)
        symbols = sum(1 for c in visible if not c.isalnum())
    return DegenerationMetrics(
        length=len(text),
        longest_char_run=char_run,
        longest_char_run_char=char,
        longest_token_run=token_run,
        abnormal_char_ratio=abnormal / len(text) if text else 0.0,
        repeated_ngram_ratio=_repeated_ngram_ratio(tokens, NGRAM),
        symbol_ratio=symbols / visible_count if visible_count else 0.0,
        empty=not stripped,
    )


def punctuation_soup(candidate: DegenerationMetrics, baseline: DegenerationMetrics) -> str | None:
    """Relative check for short outputs too brief for runs to show: mostly symbols where the
    baseline answered in words (`,- the-----` for `OK`). JSON or code on both sides is not soup."""
    if candidate.length < 4 or baseline.empty:
        return None
    if candidate.symbol_ratio >= SOUP_SYMBOL_RATIO and baseline.symbol_ratio < SOUP_BASELINE_MAX:
        return (
            f"{candidate.symbol_ratio:.0%} of the output is punctuation where the baseline's "
            f"is {baseline.symbol_ratio:.0%}"
        )
    return None


# Kinds of severe degeneration. A `loop` (a word or phrase repeated) is what a small model does
# on a long output at a near-tie: noise when the baseline loops too. The others (a run of one
# symbol like `,,,,` or `!!!!`, abnormal characters like U+FFFD runs, punctuation soup) are what a
# broken kernel produces, never a fluent model.
LOOP = "loop"
SYMBOL_RUN = "symbol-run"
ABNORMAL = "abnormal"
SOUP = "soup"


def severe_kind(m: DegenerationMetrics) -> tuple[str, str] | None:
    """(kind, reason) when the text counts as severely degenerate, else None. Emptiness is judged
    elsewhere (relative to the baseline), since an empty answer can be legitimate."""
    char = m.longest_char_run_char
    if m.longest_char_run >= SEVERE_CHAR_RUN and _is_abnormal(char):
        # A run of U+FFFD (a server decoding split UTF-8 chunks alone) or of a control character
        # is broken decoding, not a stuck decoder: a baseline's `=====` rule must not excuse it.
        why = f"U+{ord(char):04X} repeated {m.longest_char_run} times in a row"
        return ABNORMAL, why + " (broken text decoding)"
    symbol_run = not char.isalnum()
    if m.longest_char_run >= (SEVERE_CHAR_RUN if symbol_run else 2 * SEVERE_CHAR_RUN):
        why = f"same character {m.longest_char_run_char!r} repeated {m.longest_char_run} times"
        return (SYMBOL_RUN if symbol_run else LOOP), why
    if m.abnormal_char_ratio >= SEVERE_ABNORMAL_RATIO:
        return ABNORMAL, f"{m.abnormal_char_ratio:.0%} abnormal characters"
    if m.longest_token_run >= SEVERE_TOKEN_RUN:
        kind = SYMBOL_RUN if m.symbol_ratio >= SOUP_SYMBOL_RATIO else LOOP
        return kind, f"same token repeated {m.longest_token_run} times in a row"
    if m.repeated_ngram_ratio >= SEVERE_REPEATED_NGRAM_RATIO and m.length >= 40:
        return LOOP, f"{m.repeated_ngram_ratio:.0%} of {NGRAM}-grams are repeats"
    return None


def is_severe(m: DegenerationMetrics) -> str | None:
    """The reason the text counts as severely degenerate, or None (see `severe_kind`)."""
    found = severe_kind(m)
    return None if found is None else found[1]


def repeated_token_ratio(text: str) -> float:
    """Share of the text's tokens (words, or CJK characters) that repeat the token before; 0 for
    fewer than two tokens. A stuck decoder (`, , , ,`) approaches 1, fluent text stays near 0."""
    tokens = _TOKEN.findall(text)
    if len(tokens) < 2:
        return 0.0
    repeats = sum(1 for prev, tok in itertools.pairwise(tokens) if prev == tok)
    return repeats / len(tokens)
