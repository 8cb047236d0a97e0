"""Text from a server made inert for every report format: one rule, applied before any escaping.

Model output, tool arguments, error text and model names can carry NUL, ANSI escape sequences,
other control characters, bidirectional overrides and lone surrogates. Each such character is
shown as a visible escape (`\\x1b`, `\\u202e`, `\\udc80`) so the evidence stays readable and a
terminal, an XML parser or a browser never acts on it. Newlines and tabs are kept unless a
single line is asked for. What remains is valid XML 1.0 character data and valid UTF-8.
"""

from __future__ import annotations


def _escape(ch: str) -> str:
    code = ord(ch)
    if code < 256:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def plain(text: object, *, one_line: bool = False) -> str:
    """`text` as printable characters only (str() of anything else); `one_line` escapes newlines."""
    if text is None:
        return ""
    value = text if isinstance(text, str) else str(text)
    if value.isprintable() and not one_line:
        return value
    keep = "\t" if one_line else "\n\t"
    out = []
    for ch in value:
        if ch in keep or (ch.isprintable() and not 0xD800 <= ord(ch) <= 0xDFFF):
            out.append(ch)
        elif one_line and ch == "\n":
            out.append("⏎")
        else:
            out.append(_escape(ch))
    return "".join(out)
