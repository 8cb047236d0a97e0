"""What counts as valid JSON in a model's answer — the one rule every check uses.

Strict RFC 8259: Python's `json` accepts `NaN`, `Infinity` and `-Infinity`, which no JSON
parser a user's client runs (JavaScript's `JSON.parse`, Go's `encoding/json`, serde_json)
accepts, so they are refused here. A ```` ``` ```` fence around the value is accepted only
where the caller says so (a golden probe's `allow_fence`); JSON mode, tool-call arguments and
the answer classifier take the text as it is.
"""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = ["fenced", "is_json", "is_json_object", "parse_json"]

_FENCE = re.compile(r"```[ \t]*([\w+-]*)[ \t]*\n(.*?)(?:```|\Z)", re.DOTALL)


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def fenced(text: str) -> str | None:
    """The body of the first ``` fence in the text (JSON or code), or None."""
    match = _FENCE.search(text)
    return match.group(2) if match else None


def parse_json(text: str, allow_fence: bool = False) -> tuple[Any, str | None]:
    """The parsed value and None, or None and why the text is not JSON."""
    source = text.strip()
    if allow_fence:
        source = (fenced(source) or source).strip()
    if not source:
        return None, "empty content"
    try:
        return json.loads(source, parse_constant=_refuse_constant), None
    except ValueError as exc:
        return None, str(exc)


def is_json(text: str, allow_fence: bool = False) -> bool:
    """Whether the text is one valid JSON value."""
    return parse_json(text, allow_fence)[1] is None


def is_json_object(text: str) -> bool:
    """Whether the text is a valid JSON object (what tool-call arguments must be)."""
    value, error = parse_json(text)
    return error is None and isinstance(value, dict)
