"""Non-streamed response bodies: JSON decoding, chat/completions choices, embeddings validation."""

from __future__ import annotations

import base64
import json
import math
import struct
from typing import Any

from servegate.endpoints.draft import CompletionDraft, body_error, parse_usage
from servegate.endpoints.errors import ErrorCategory, FaultError
from servegate.endpoints.logprobs import chat_logprobs, legacy_logprobs, native_prompt_logprobs
from servegate.endpoints.text import INLINE_CHARS, excerpt
from servegate.endpoints.tool_calls import message_tool_calls
from servegate.endpoints.types import Usage


def decode_json(data: bytes, what: str = "response body") -> Any:
    """UTF-8 (BOM allowed) JSON; DECODE for invalid UTF-8, PARSE for anything else."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise FaultError(ErrorCategory.DECODE, f"{what} is not UTF-8 at byte {exc.start}") from exc
    try:
        return json.loads(text)
    except ValueError as exc:
        raise FaultError(
            ErrorCategory.PARSE, f"{what} is not JSON ({exc}): {excerpt(text, INLINE_CHARS)}"
        ) from exc


def completion_draft(obj: Any, *, chat: bool) -> CompletionDraft:
    """Choice 0 of a chat or completions body; ERROR_BODY for an HTTP-200 error object."""
    message = body_error(obj)
    if message is not None:
        raise FaultError(ErrorCategory.ERROR_BODY, f"HTTP 200 error body: {excerpt(message)}")
    if not isinstance(obj, dict):
        raise FaultError(ErrorCategory.SCHEMA, "response body is not a JSON object")
    choices = obj.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise FaultError(ErrorCategory.SCHEMA, "response body has no choices[0] object")
    draft = CompletionDraft(raw=obj, usage=parse_usage(obj.get("usage")))
    draft.model = obj.get("model") if isinstance(obj.get("model"), str) else None
    choice = choices[0]
    reason = choice.get("finish_reason")
    draft.finish_reason = reason if isinstance(reason, str) else None
    if len(choices) > 1:
        draft.flags.add("extra_choices")
    if chat:
        _chat_choice(draft, choice)
    else:
        _text_choice(draft, choice)
    return draft


def _chat_choice(draft: CompletionDraft, choice: dict[str, Any]) -> None:
    message = choice.get("message")
    if not isinstance(message, dict):
        raise FaultError(ErrorCategory.SCHEMA, "choices[0].message is not an object")
    content = message.get("content")
    if isinstance(content, str):
        draft.add_content(content)
    elif content is not None:
        raise FaultError(ErrorCategory.SCHEMA, "message.content is neither a string nor null")
    for key in ("reasoning_content", "reasoning"):
        value = message.get(key)
        if isinstance(value, str):
            draft.add_reasoning(value)
            break
    draft.tool_calls = message_tool_calls(message.get("tool_calls"))
    if "logprobs" in choice and choice["logprobs"] is not None:
        draft.logprobs = chat_logprobs(choice["logprobs"])


def _text_choice(draft: CompletionDraft, choice: dict[str, Any]) -> None:
    text = choice.get("text")
    if isinstance(text, str):
        draft.add_content(text)
    elif text is not None:
        raise FaultError(ErrorCategory.SCHEMA, "choices[0].text is neither a string nor null")
    logprobs = choice.get("logprobs")
    if isinstance(logprobs, dict):
        draft.legacy = legacy_logprobs(logprobs)
        offsets = logprobs.get("text_offset")
        if isinstance(offsets, list):
            draft.text_offsets = [o for o in offsets if isinstance(o, int)]
    native = choice.get("prompt_logprobs")
    if native is not None:  # vLLM's own prompt scoring (request field `prompt_logprobs`)
        draft.native_prompt = native_prompt_logprobs(native)


def embeddings_of(obj: Any, request: Any) -> tuple[tuple[tuple[float, ...], ...], Usage | None]:
    """Vectors ordered by `index`; EMBEDDING_INVALID for wrong count, ragged or wrong dimension,
    NaN/Infinity, or a zero vector."""
    message = body_error(obj)
    if message is not None:
        raise FaultError(ErrorCategory.ERROR_BODY, f"HTTP 200 error body: {excerpt(message)}")
    data = obj.get("data") if isinstance(obj, dict) else None
    if not isinstance(data, list) or not all(isinstance(d, dict) for d in data):
        raise FaultError(ErrorCategory.SCHEMA, "embeddings body has no data list of objects")
    items = sorted(enumerate(data), key=lambda p: _index(p[1], p[0]))
    vectors = tuple(_vector(d, i) for i, d in items)
    expected = _input_count(request.get("input"))
    if expected is not None and len(vectors) != expected:
        raise FaultError(
            ErrorCategory.EMBEDDING_INVALID, f"{len(vectors)} embeddings for {expected} inputs"
        )
    dims = {len(v) for v in vectors}
    wanted = request.get("dimensions")
    if len(dims) > 1 or (isinstance(wanted, int) and dims and dims != {wanted}):
        raise FaultError(
            ErrorCategory.EMBEDDING_INVALID,
            f"embedding dimensions {sorted(dims)} (requested {wanted})",
        )
    return vectors, parse_usage(obj.get("usage"))


def _index(item: dict[str, Any], position: int) -> int:
    index = item.get("index")
    return index if isinstance(index, int) else position


def _vector(item: dict[str, Any], i: int) -> tuple[float, ...]:
    raw = item.get("embedding")
    if isinstance(raw, str):  # encoding_format=base64: little-endian float32
        packed = base64.b64decode(raw)
        raw = list(struct.unpack(f"<{len(packed) // 4}f", packed[: len(packed) // 4 * 4]))
    if not isinstance(raw, list) or not raw:
        raise FaultError(ErrorCategory.EMBEDDING_INVALID, f"embedding {i} is empty or not a list")
    if not all(isinstance(x, int | float) and not isinstance(x, bool) for x in raw):
        raise FaultError(ErrorCategory.EMBEDDING_INVALID, f"embedding {i} holds non-numbers")
    vector = tuple(float(x) for x in raw)
    if not all(math.isfinite(x) for x in vector):
        raise FaultError(ErrorCategory.EMBEDDING_INVALID, f"embedding {i} holds NaN or Infinity")
    if not any(vector):
        raise FaultError(ErrorCategory.EMBEDDING_INVALID, f"embedding {i} has zero norm")
    return vector


def _input_count(value: Any) -> int | None:
    if isinstance(value, str):
        return 1
    if isinstance(value, list) and value:
        if all(isinstance(x, int) for x in value):
            return 1  # one input given as token ids
        return len(value)
    return None
