"""Secrets taken out of what the proxy writes (store rows, capture files) before it reaches disk.

Headers that carry credentials are dropped whole; inside bodies, strings that look like keys
(`sk-…`, `Bearer …`, long hex or base64url tokens after `key`/`token`/`secret` words) are replaced
by a marker, and object fields named like secrets lose their value whatever it looks like.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

MARK = "[REDACTED]"

# Header names whose values never reach disk (compared lower-case).
SECRET_HEADERS = frozenset(
    {
        "authorization",
        "proxy-authorization",
        "cookie",
        "set-cookie",
        "api-key",
        "x-api-key",
        "openai-api-key",
        "x-goog-api-key",
        "anthropic-api-key",
        "openai-organization",
        "openai-project",
    }
)
_SECRET_HEADER_PARTS = ("key", "token", "secret", "auth", "cookie", "session", "password")

# JSON object keys whose values are dropped whatever they hold.
_SECRET_FIELD = re.compile(
    r"(api[-_]?key|secret|password|passwd|authorization|cookie"
    r"|(access|api|auth|refresh|id|bearer|session)[-_]?token)",
    re.I,
)

_SECRET_TEXT = re.compile(
    r"(?:"
    r"\bsk-[A-Za-z0-9_\-]{8,}"  # OpenAI-style keys, sk-proj-…, sk-ant-…
    r"|\bBearer\s+[A-Za-z0-9._~+/=\-]{8,}"
    r"|\b(?:ghp|gho|ghu|ghs|github_pat|xox[abpr]|hf|AKIA)_?[A-Za-z0-9_\-]{12,}"
    r"|\beyJ[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-]{10,}"  # JWTs
    r"|(?i:(?:api[-_]?key|token|secret|password)\s*[:=]\s*)[\"']?[^\s\"',;]{6,}"
    r")"
)


def redact_text(text: str) -> str:
    """The text with every key-like string replaced by the marker."""
    return _SECRET_TEXT.sub(MARK, text)


def redact_value(value: Any) -> Any:
    """A JSON value with secret-named fields and key-like strings redacted, recursively."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, Mapping):
        return {
            k: (MARK if isinstance(k, str) and _is_secret_field(k, v) else redact_value(v))
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [redact_value(v) for v in value]
    return value


def _is_secret_field(name: str, value: Any) -> bool:
    # `max_tokens`, `top_logprobs`… are not secrets: only scalar strings under a secret name are.
    return isinstance(value, str) and _SECRET_FIELD.search(name) is not None


def is_secret_header(name: str) -> bool:
    """Whether a header's value must never be written down."""
    lower = name.lower()
    return lower in SECRET_HEADERS or any(part in lower for part in _SECRET_HEADER_PARTS)


def redact_headers(headers: Iterable[tuple[str, str]]) -> dict[str, str]:
    """Headers as a dict, secret ones marked, the rest with key-like strings redacted."""
    return {
        name.lower(): MARK if is_secret_header(name) else redact_text(value)
        for name, value in headers
    }
