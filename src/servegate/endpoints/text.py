"""Text taken in from a server: lone surrogates cleaned; and the one rule for showing a piece of
it — `clip` (cut, saying how much) and `excerpt` (clipped and printable) — with its lengths."""

from __future__ import annotations

import re

from servegate.endpoints.types import Completion

_SURROGATE = re.compile("[\ud800-\udfff]")
# How much of a text a report shows, by where it is shown:
EXCERPT_CHARS = 300  # a body or a message on its own (an error body, a stream's error event)
FINDING_CHARS = 200  # an answer in a finding's baseline/candidate excerpt
INLINE_CHARS = 120  # data quoted inside a one-line error message (an SSE event that is not JSON)
QUOTE_CHARS = 80  # an answer quoted inside an assertion's one-line reason


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


def clip(text: str, limit: int, *, count_cut: bool = True) -> str:
    """At most `limit` characters, then a marker where the text was cut: `… (+N)` saying how
    many characters were cut (reports, findings), or a bare `…` (`count_cut=False`: a body or an
    error message kept with a request, bounded at `limit` + 1 characters)."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… (+{len(text) - limit})" if count_cut else f"{text[:limit]}…"


def _printable(ch: str) -> str:
    if ch.isprintable() or ch in "\n\t":
        return ch
    return f"\\x{ord(ch):02x}" if ord(ch) < 256 else f"\\u{ord(ch):04x}"


def excerpt(
    data: bytes | str | None, limit: int = EXCERPT_CHARS, *, count_cut: bool = False
) -> str:
    """A printable excerpt: bytes decoded (invalid UTF-8 replaced), surrogates cleaned, control
    and other non-printable characters escaped (\\xNN, \\uNNNN; newline and tab kept), cut by
    `clip`. None stays visible as `<null>`."""
    if data is None:
        return "<null>"
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
    text, _ = clean_surrogates(text)
    return clip("".join(_printable(ch) for ch in text), limit, count_cut=count_cut)


def quoted(text: str | None, limit: int = QUOTE_CHARS) -> str:
    """An answer quoted inside a one-line reason: its repr, clipped; None stays `null`."""
    return "null" if text is None else repr(clip(text, limit, count_cut=False))


def exception_text(exc: BaseException) -> str:
    """An exception for a message: its type and a bounded excerpt of its text."""
    text = str(exc)
    return f"{type(exc).__name__}: {excerpt(text, FINDING_CHARS)}" if text else type(exc).__name__


# How much of an answer names its "opening": the category whose distribution sampled answers to
# one repeated request are compared on (first words vary with the sampler, not with the length).
OPENING_WORDS = 3


def opening(completion: Completion) -> str:
    """The answer's first OPENING_WORDS words; a tool call's name where there is no text."""
    words = completion.text.split()[:OPENING_WORDS]
    if words:
        return " ".join(words)
    calls = completion.tool_calls
    return f"<tool {calls[0].name}>" if calls else "<empty>"
