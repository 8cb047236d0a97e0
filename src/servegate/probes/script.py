"""Which writing system a text is in: the share of its letters per script, and language markers."""

from __future__ import annotations

import re
import unicodedata

# Code-point ranges per script; letters outside every range count as "other".
SCRIPT_RANGES: dict[str, tuple[tuple[int, int], ...]] = {
    "han": ((0x3400, 0x4DBF), (0x4E00, 0x9FFF), (0xF900, 0xFAFF), (0x20000, 0x2FA1F)),
    "kana": ((0x3040, 0x30FF), (0x31F0, 0x31FF), (0xFF66, 0xFF9F)),
    "hangul": ((0x1100, 0x11FF), (0x3130, 0x318F), (0xAC00, 0xD7AF)),
    "latin": ((0x41, 0x5A), (0x61, 0x7A), (0xC0, 0x24F), (0x1E00, 0x1EFF)),
    "cyrillic": ((0x400, 0x52F),),
    "greek": ((0x370, 0x3FF), (0x1F00, 0x1FFF)),
    "arabic": ((0x600, 0x6FF), (0x750, 0x77F)),
    "hebrew": ((0x590, 0x5FF),),
    "devanagari": ((0x900, 0x97F),),
    "thai": ((0xE00, 0xE7F),),
}

# Languages written in a script shared with others also need one of their common function words.
LANGUAGE_SCRIPTS: dict[str, tuple[str, ...]] = {
    "zh": ("han",),
    "ja": ("kana", "han"),
    "ko": ("hangul",),
    "ru": ("cyrillic",),
    "el": ("greek",),
    "ar": ("arabic",),
    "en": ("latin",),
    "fr": ("latin",),
    "es": ("latin",),
    "de": ("latin",),
}


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


MARKER_WORDS: dict[str, frozenset[str]] = {
    "en": _words("the a an is are and of to in it you i this that yes no hello"),
    "fr": _words(
        "le la les un une des du de est et je vous il elle nous ce c'est pas pour dans avec "
        "bonjour merci oui non suis sont au aux"
    ),
    "es": _words(
        "el la los las un una es y de que en por para con no sí hola gracias soy está son"
    ),
    "de": _words(
        "der die das ein eine ist und ich du sie nicht mit für auf hallo danke ja nein bin"
    ),
}
_WORD = re.compile(r"[^\W\d_]+(?:'[^\W\d_]+)?")


def script_of(ch: str) -> str | None:
    """The script a letter belongs to, or None for non-letters and unlisted scripts."""
    if not unicodedata.category(ch).startswith("L"):
        return None
    code = ord(ch)
    for name, ranges in SCRIPT_RANGES.items():
        if any(lo <= code <= hi for lo, hi in ranges):
            return name
    return None


def script_shares(text: str) -> tuple[int, dict[str, float]]:
    """The number of letters and the share of them in each script."""
    letters = [ch for ch in text if unicodedata.category(ch).startswith("L")]
    counts: dict[str, int] = {}
    for ch in letters:
        name = script_of(ch) or "other"
        counts[name] = counts.get(name, 0) + 1
    total = len(letters)
    return total, {k: v / total for k, v in counts.items()} if total else {}


def marker_words(text: str, language: str) -> list[str]:
    """The function words of `language` found in the text (only for Latin-script languages)."""
    words = MARKER_WORDS.get(language, frozenset())
    seen = {w.casefold().replace("’", "'") for w in _WORD.findall(text)}
    return sorted(seen & words)
