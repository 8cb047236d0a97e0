"""The Responses API (`POST /v1/responses`) as a surface: one parser for the response object and
one for its event stream, read into the same `Completion` the chat and text APIs give, so the
gates compare it with the tools they already have.

A stream is framed by the SSE parser the chat streams use (sse.py) and judged with the same
taxonomy (errors.py): data that is not JSON is `parse`, an `error` or `response.failed` event is
`stream_error`, a stream that ends before a terminal event (`response.completed`,
`response.incomplete`, `response.failed`) is `truncated`, a `sequence_number` out of order is
`schema`. The text is the joined `response.output_text.delta`s; a final object whose text differs
is flagged `stream_final_mismatch`. Event shapes as vLLM 0.32.0 sends them (tests/data/vllm/).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from servegate.endpoints.errors import ErrorCategory, FaultError, RequestError
from servegate.endpoints.protocol import Endpoint
from servegate.endpoints.sse import SSEParser
from servegate.endpoints.types import Completion, ToolCall, Usage

PATH = "/responses"
TERMINAL_EVENTS = frozenset({"response.completed", "response.incomplete", "response.failed"})


@dataclass(frozen=True, slots=True)
class ResponsesAnswer:
    """One Responses API answer: the Completion the gates read, and what is particular to it."""

    completion: Completion
    response_status: str | None = None  # "completed", "incomplete", "failed", ...
    events: tuple[str, ...] = ()  # streamed: the event types in order


def _usage(obj: Any) -> Usage | None:
    if not isinstance(obj, Mapping):
        return None
    details = obj.get("input_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, Mapping) else None

    def count(key: str) -> int | None:
        value = obj.get(key)
        return value if isinstance(value, int) else None

    return Usage(
        prompt_tokens=count("input_tokens"),
        completion_tokens=count("output_tokens"),
        total_tokens=count("total_tokens"),
        cached_tokens=cached if isinstance(cached, int) else None,
    )


def _finish(status: Any, incomplete: Any, has_tools: bool) -> str | None:
    # The chat API's finish_reason, so both surfaces read alike.
    if has_tools:
        return "tool_calls"
    if status == "completed":
        return "stop"
    if status == "incomplete" and isinstance(incomplete, Mapping):
        reason = incomplete.get("reason")
        return "length" if reason == "max_output_tokens" else str(reason)
    return None if status is None else str(status)


def parse_response(obj: Any, status: int | None = 200) -> ResponsesAnswer:
    """A response object (non-streamed body, or a terminal event's `response`)."""
    if not isinstance(obj, Mapping) or not isinstance(obj.get("output"), list):
        bad = RequestError(ErrorCategory.SCHEMA, "not a response object (no output list)",
                           status=status, body_excerpt=json.dumps(obj)[:300])  # fmt: skip
        return ResponsesAnswer(Completion(status=status, error=bad))
    texts: list[str] = []
    reasoning: list[str] = []
    calls: list[ToolCall] = []
    for item in obj["output"]:
        if not isinstance(item, Mapping):
            continue
        kind = item.get("type")
        if kind == "message":
            for part in item.get("content") or ():
                if isinstance(part, Mapping) and part.get("type") == "output_text":
                    texts.append(str(part.get("text") or ""))
        elif kind == "function_call":
            calls.append(ToolCall(index=len(calls), id=item.get("call_id"), name=item.get("name"),
                                  arguments=str(item.get("arguments") or "")))  # fmt: skip
        elif kind == "reasoning":
            for part in item.get("content") or item.get("summary") or ():
                if isinstance(part, Mapping):
                    reasoning.append(str(part.get("text") or ""))
    state = obj.get("status")
    error: RequestError | None = None
    if state == "failed":
        detail = obj.get("error")
        error = RequestError(ErrorCategory.ERROR_BODY, f"response failed: {detail}"[:300],
                             status=status)  # fmt: skip
    completion = Completion(
        status=status,
        content="".join(texts) if texts else None,
        reasoning="".join(reasoning) if reasoning else None,
        tool_calls=tuple(calls),
        finish_reason=_finish(state, obj.get("incomplete_details"), bool(calls)),
        usage=_usage(obj.get("usage")),
        model=obj.get("model") if isinstance(obj.get("model"), str) else None,
        error=error,
        raw=dict(obj),
    )
    return ResponsesAnswer(completion, state if isinstance(state, str) else None)


def parse_stream(body: bytes, status: int | None = 200) -> ResponsesAnswer:
    """A whole `text/event-stream` of Responses events."""
    parser = SSEParser()
    events: list[str] = []
    deltas: list[str] = []
    final: ResponsesAnswer | None = None
    flags: list[str] = []
    last_seq = -1

    def failed(category: ErrorCategory, message: str) -> ResponsesAnswer:
        error = RequestError(category, message, status=status)
        partial = Completion(status=status, content="".join(deltas) or None, error=error)
        return ResponsesAnswer(partial, None, tuple(events))

    try:
        sse_events = parser.feed(body) + parser.feed(
            b"\n\n" if body and not body.endswith(b"\n\n") else b""
        )
    except FaultError as exc:
        return failed(exc.category, exc.message)
    for ev in sse_events:
        if ev.data.strip() == "[DONE]":
            continue
        try:
            data = json.loads(ev.data)
        except ValueError:
            return failed(ErrorCategory.PARSE, f"event {len(events)} is not JSON: {ev.data[:80]!r}")
        kind = data.get("type") if isinstance(data, Mapping) else None
        if not isinstance(kind, str):
            return failed(ErrorCategory.SCHEMA, f"event {len(events)} has no type")
        events.append(kind)
        if ev.event not in ("message", kind):
            flags.append("event_name_mismatch")
        seq = data.get("sequence_number")
        if isinstance(seq, int):
            if seq <= last_seq:
                return failed(ErrorCategory.SCHEMA, f"sequence_number {seq} after {last_seq}")
            last_seq = seq
        if kind == "response.output_text.delta":
            deltas.append(str(data.get("delta") or ""))
        elif kind == "error":
            return failed(ErrorCategory.STREAM_ERROR, f"error event: {data.get('message')}"[:300])
        elif kind in TERMINAL_EVENTS:
            final = parse_response(data.get("response"), status)
    if final is None:
        return failed(ErrorCategory.TRUNCATED, f"the stream ended after {len(events)} events "
                      "without response.completed, .incomplete or .failed")  # fmt: skip
    streamed = "".join(deltas)
    if final.completion.content is not None and final.completion.content != streamed:
        flags.append("stream_final_mismatch")
    if final.response_status and events[-1] != f"response.{final.response_status}":
        # vLLM 0.32.0 ends an incomplete response (max_output_tokens) with response.completed.
        flags.append("terminal_event_status_mismatch")
    completion = replace(final.completion, content=streamed if deltas else final.completion.content,
                         flags=tuple(dict.fromkeys(flags)))  # fmt: skip
    return ResponsesAnswer(completion, final.response_status, tuple(events))


async def respond(
    ep: Endpoint, body: Mapping[str, Any], *, deadline_s: float | None = None
) -> ResponsesAnswer:
    """POST /responses (streamed when `body["stream"]`), parsed; failures are data."""
    raw = await ep.raw("POST", PATH, dict(body), deadline_s=deadline_s)
    if raw.error is not None:
        return ResponsesAnswer(Completion(status=raw.status, error=raw.error))
    if not raw.ok:
        category = ErrorCategory.REJECTED if (raw.status or 0) < 500 else ErrorCategory.SERVER
        excerpt = raw.body[:300].decode("utf-8", "replace")
        error = RequestError(category, f"HTTP {raw.status}", status=raw.status,
                             body_excerpt=excerpt)  # fmt: skip
        return ResponsesAnswer(Completion(status=raw.status, error=error))
    if body.get("stream"):
        return parse_stream(raw.body, raw.status)
    try:
        obj = raw.json()
    except ValueError:
        error = RequestError(ErrorCategory.PARSE, "body is not JSON", status=raw.status)
        return ResponsesAnswer(Completion(status=raw.status, error=error))
    return parse_response(obj, raw.status)
