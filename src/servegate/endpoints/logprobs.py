"""Token logprobs in both OpenAI shapes, with NaN/±Infinity refused (Python's json accepts them).

Chat shape: `choices[i].logprobs.content[] = {token, logprob, top_logprobs: [{token, logprob}]}`.
Legacy completions shape: `choices[i].logprobs = {tokens, token_logprobs, top_logprobs: [{tok:
lp}], text_offset}`; with `echo` the prompt tokens come first and the first has no logprob.
"""

from __future__ import annotations

import math
from typing import Any

from servegate.endpoints.errors import ErrorCategory, FaultError
from servegate.endpoints.types import TokenLogprob


def _finite(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise FaultError(ErrorCategory.SCHEMA, f"logprob at {where} is not a number: {value!r}")
    number = float(value)
    if not math.isfinite(number):
        raise FaultError(ErrorCategory.NON_FINITE_LOGPROB, f"logprob {number} at {where}")
    return number


def chat_logprobs(obj: Any, offset: int = 0) -> list[TokenLogprob]:
    """Entries of a chat `logprobs` object ({"content": [...]}); [] when null or empty."""
    if obj is None:
        return []
    if not isinstance(obj, dict):
        raise FaultError(ErrorCategory.SCHEMA, "logprobs is not an object")
    content = obj.get("content")
    if content is None:
        return []
    if not isinstance(content, list):
        raise FaultError(ErrorCategory.SCHEMA, "logprobs.content is not a list")
    entries: list[TokenLogprob] = []
    for i, item in enumerate(content, start=offset):
        if not isinstance(item, dict) or not isinstance(item.get("token"), str):
            raise FaultError(ErrorCategory.SCHEMA, f"logprobs.content[{i}] has no token")
        top_raw = item.get("top_logprobs") or []
        if not isinstance(top_raw, list):
            raise FaultError(ErrorCategory.SCHEMA, f"top_logprobs of token {i} is not a list")
        top = tuple(
            (str(t.get("token")), _finite(t.get("logprob"), f"token {i} top {k}"))
            for k, t in enumerate(top_raw)
            if isinstance(t, dict)
        )
        entries.append(TokenLogprob(item["token"], _finite(item.get("logprob"), f"token {i}"), top))
    return entries


def legacy_logprobs(obj: Any, offset: int = 0) -> list[TokenLogprob | None]:
    """Entries of a completions `logprobs` object; None where a token has no logprob (echo's
    first prompt token)."""
    if obj is None:
        return []
    if not isinstance(obj, dict):
        raise FaultError(ErrorCategory.SCHEMA, "logprobs is not an object")
    tokens = obj.get("tokens") or []
    values = obj.get("token_logprobs") or []
    tops = obj.get("top_logprobs") or []
    if not isinstance(tokens, list) or not isinstance(values, list) or not isinstance(tops, list):
        raise FaultError(ErrorCategory.SCHEMA, "logprobs tokens/token_logprobs are not lists")
    if len(values) != len(tokens):
        raise FaultError(
            ErrorCategory.SCHEMA,
            f"logprobs has {len(tokens)} tokens but {len(values)} token_logprobs",
        )
    entries: list[TokenLogprob | None] = []
    for i, (token, value) in enumerate(zip(tokens, values, strict=True), start=offset):
        if value is None:
            entries.append(None)
            continue
        top_raw = tops[i - offset] if i - offset < len(tops) else None
        top: tuple[tuple[str, float], ...] = ()
        if isinstance(top_raw, dict):
            top = tuple((str(t), _finite(v, f"token {i} top {t!r}")) for t, v in top_raw.items())
        entries.append(TokenLogprob(str(token), _finite(value, f"token {i}"), top))
    return entries


def split_echo(
    entries: list[TokenLogprob | None],
    text_offsets: list[int],
    *,
    prompt_tokens: int | None,
    prompt_chars: int | None,
) -> tuple[list[TokenLogprob | None], list[TokenLogprob | None]] | None:
    """Split echoed entries into (prompt, generated) by usage.prompt_tokens, else by text_offset
    against the prompt length; None when neither is known."""
    if prompt_tokens is not None and 0 <= prompt_tokens <= len(entries):
        return entries[:prompt_tokens], entries[prompt_tokens:]
    if prompt_chars is not None and len(text_offsets) == len(entries):
        cut = next((i for i, o in enumerate(text_offsets) if o >= prompt_chars), len(entries))
        return entries[:cut], entries[cut:]
    return None


def native_prompt_logprobs(obj: Any) -> list[TokenLogprob | None]:
    """vLLM's `choices[i].prompt_logprobs`: one entry per prompt token, None for the first, else
    `{token_id: {logprob, rank, decoded_token}}` whose first key is the prompt token itself
    (ranked wherever it falls) and the rest its top-k."""
    if not isinstance(obj, list):
        raise FaultError(ErrorCategory.SCHEMA, "prompt_logprobs is not a list")
    entries: list[TokenLogprob | None] = []
    for i, item in enumerate(obj):
        if item is None:
            entries.append(None)
            continue
        if not isinstance(item, dict) or not item:
            raise FaultError(ErrorCategory.SCHEMA, f"prompt_logprobs[{i}] is not an object")
        ranked = []
        for key, value in item.items():
            if not isinstance(value, dict):
                raise FaultError(ErrorCategory.SCHEMA, f"prompt_logprobs[{i}][{key!r}]")
            token = value.get("decoded_token")
            ranked.append(
                (
                    str(token if token is not None else key),
                    _finite(value.get("logprob"), f"prompt token {i}"),
                )
            )
        own_token, own = ranked[0]
        entries.append(TokenLogprob(own_token, own, tuple(ranked)))
    return entries
