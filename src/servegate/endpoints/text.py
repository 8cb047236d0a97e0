"""Text taken in from a server: lone surrogates cleaned, excerpts bounded and control-free."""

from __future__ import annotations

import re

_SURROGATE = re.compile("[\ud800-\udfff]")
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")
EXCERPT_CHARS = 300


def clean_surrogates(text: str) -> tuple[str, bool]:
    """Join surrogate pairs split across deltas and replace lone surrogates with U+FFFD.

    JSON's `\\ud800` escapes decode to lone surrogates that UTF-8, sqlite3 and XML reject; the
    second value says whether any lone surrogate was replaced.
    """
    if _SURROGATE.search(text) is None:
        return text, False
    joined = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")
    if _SURROGATE.search(joined) is None:
        return joined, False
    return _SURROGATE.sub("\ufffd", joined), True


def excerpt(data: bytes | str, limit: int = EXCERPT_CHARS) -> str:
    """The first `limit` characters of a body, control characters escaped as \\xNN."""
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
    cut = len(text) > limit
    text = _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text[:limit])
    text, _ = clean_surrogates(text)
    return text + "…" if cut else text


def exception_text(exc: BaseException) -> str:
    """An exception for a message: its type and a bounded excerpt of its text."""
    text = str(exc)
    return f"{type(exc).__name__}: {excerpt(text, 200)}" if text else type(exc).__name__
