"""Streamed chat/completions chunks assembled into one Completion, with token-chunk timing.

A chunk carries tokens when it has non-empty content, reasoning or a tool-call delta (the empty
role chunk does not). Its token count comes from its logprob entries, else from the growth of a
cumulative `usage.completion_tokens`, else 1 (flagged `chunk_tokens_estimated`).
"""

from __future__ import annotations

import json
from itertools import repeat
from typing import Any, Literal

import msgspec

from servegate.endpoints.draft import CompletionDraft, body_error, parse_usage
from servegate.endpoints.errors import ErrorCategory, FaultError
from servegate.endpoints.logprobs import chat_logprobs, legacy_logprobs
from servegate.endpoints.sse import SSEEvent
from servegate.endpoints.text import INLINE_CHARS, excerpt
from servegate.endpoints.timing import TimingRecorder
from servegate.endpoints.tool_calls import ToolCallMerger

DONE = "[DONE]"


class StreamAssembler:
    """Feed SSE events in order; `done` turns True at `data: [DONE]`."""

    def __init__(self, recorder: TimingRecorder, *, chat: bool) -> None:
        self.draft = CompletionDraft()
        self.done = False
        self.events = 0
        self._recorder = recorder
        self._chat = chat
        self._tools = ToolCallMerger()
        self._usage_tokens = 0

    def add(self, event: SSEEvent) -> None:
        """Take one event; raises FaultError for error events, non-JSON data and bad shapes."""
        self.events += 1
        if not event.complete:
            self.draft.flags.add("unterminated_event")
        if self.done:
            self.draft.flags.add("events_after_done")
            return
        if event.data == DONE:
            self.done = True
            self._recorder.done_ns = event.arrival_ns
            return
        if event.event == "error":
            raise FaultError(
                ErrorCategory.STREAM_ERROR,
                f"error event {event.index} in stream: {excerpt(_message(event.data))}",
            )
        try:
            chunk = _loads(event.data)
        except ValueError:
            if not event.complete:
                raise FaultError(
                    ErrorCategory.TRUNCATED,
                    f"stream ended inside event {event.index}: {excerpt(event.data, INLINE_CHARS)}",
                ) from None
            raise FaultError(
                ErrorCategory.PARSE,
                f"event {event.index} is not JSON: {excerpt(event.data, INLINE_CHARS)}",
            ) from None
        self._chunk(chunk, event)

    def add_data(self, payloads: list[bytes | str], first_index: int, arrival_ns: int) -> None:
        """Take consecutive events given by their data alone (see `sse.EventSink.add_data`).

        Every streamed token passes here. The usual chat token chunk is read into `_PlainChunk`
        (which checks in C what `_chunk`'s quick path checks) and taken in this loop with that
        path's outcome, its stamps and counts settled in one go; any other event (role, finish,
        usage, [DONE], logprobs, errors, data that is not JSON) goes to `add` as the SSEEvent it
        stands for, after what came before it is settled.
        """
        decode = _decode_plain
        draft = self.draft
        parts = draft.content
        plain = self._chat and not self.done
        taken = tokens = 0  # events taken and token chunks among them, not yet settled
        model: str | msgspec.UnsetType = msgspec.UNSET
        try:
            for offset, data in enumerate(payloads):
                if plain:
                    try:
                        chunk = decode(data)
                    except ValueError:  # not this shape (or not JSON): `add` decides
                        pass
                    else:
                        taken += 1
                        if chunk.model is not msgspec.UNSET:
                            model = chunk.model
                        content = chunk.choices[0].delta.content
                        if parts is None:
                            parts = draft.content = []
                        parts.append(content)
                        if content:  # no logprobs, no usage: one token, estimated
                            tokens += 1
                        continue
                self._settle(taken, tokens, model, arrival_ns)
                taken = tokens = 0
                model = msgspec.UNSET
                text = data.decode("ascii") if isinstance(data, bytes) else data
                self.add(SSEEvent(text, index=first_index + offset, arrival_ns=arrival_ns))
                plain = self._chat and not self.done
                parts = draft.content
        finally:
            self._settle(taken, tokens, model, arrival_ns)

    def _settle(
        self, taken: int, tokens: int, model: str | msgspec.UnsetType, arrival_ns: int
    ) -> None:
        """What `taken` quick-path events with `tokens` token chunks leave behind: `add` would
        have counted each, kept the last model string, stamped each token chunk with one token."""
        self.events += taken
        if not isinstance(model, msgspec.UnsetType):
            self.draft.model = model
        if tokens:
            self._recorder.chunk_ns.extend(repeat(arrival_ns, tokens))
            self._recorder.chunk_tokens.extend(repeat(1, tokens))
            self.draft.flags.add("chunk_tokens_estimated")

    def _chunk(self, chunk: Any, event: SSEEvent) -> None:
        # Every event that comes one by one passes here (`add_data` takes the usual run). The
        # usual chat token chunk (one choice 0 whose delta is only a content string, no logprobs,
        # finish reason, usage or error) is taken here with the same outcome as the general path
        # below; anything else goes that way.
        if self._chat and type(chunk) is dict:
            content = _plain_content(chunk)
            if content is not None:
                self._content_chunk(chunk, content, event.arrival_ns)
                return
        self._checked_chunk(chunk, event)

    def _content_chunk(self, chunk: dict[str, Any], content: str, arrival_ns: int) -> None:
        draft = self.draft
        model = chunk.get("model")
        if type(model) is str:
            draft.model = model
        if draft.content is None:
            draft.content = []
        draft.content.append(content)
        if content:  # no logprobs, no usage: one token, estimated
            self._recorder.token_chunk(arrival_ns, 1)
            draft.flags.add("chunk_tokens_estimated")

    def _checked_chunk(self, chunk: Any, event: SSEEvent) -> None:
        # key tests first, the full checks only when they hit
        if not isinstance(chunk, dict):
            raise FaultError(ErrorCategory.SCHEMA, f"event {event.index} is not a JSON object")
        if "error" in chunk or chunk.get("object") == "error":
            message = body_error(chunk)
            if message is not None:
                raise FaultError(
                    ErrorCategory.STREAM_ERROR,
                    f"error in stream event {event.index}: {excerpt(message)}",
                )
        draft = self.draft
        model = chunk.get("model")
        if isinstance(model, str):
            draft.model = model
        usage = parse_usage(chunk["usage"]) if "usage" in chunk else None
        if usage is not None:
            draft.usage = usage
        choices = chunk.get("choices")
        if choices is None and usage is not None:
            return  # a usage-only chunk; `choices: []` is the documented shape, absent is harmless
        if not isinstance(choices, list):
            raise FaultError(ErrorCategory.SCHEMA, f"event {event.index} has no choices list")
        tokens = 0
        carried = False
        for choice in choices:
            if not isinstance(choice, dict):
                raise FaultError(ErrorCategory.SCHEMA, f"event {event.index}: choice not an object")
            if choice.get("index", 0) != 0:
                draft.flags.add("extra_choices")
                continue
            reason = choice.get("finish_reason")
            if isinstance(reason, str):
                draft.finish_reason = reason
            if self._chat:
                carried, tokens = self._chat_choice(choice, event.index)
            else:
                carried, tokens = self._text_choice(choice)
        if carried:
            if not tokens and usage is not None and usage.completion_tokens is not None:
                tokens = usage.completion_tokens - self._usage_tokens
            if tokens <= 0:
                tokens = 1
                draft.flags.add("chunk_tokens_estimated")
            self._recorder.token_chunk(event.arrival_ns, tokens)
        if usage is not None and usage.completion_tokens is not None:
            self._usage_tokens = usage.completion_tokens

    def _chat_choice(self, choice: dict[str, Any], index: int) -> tuple[bool, int]:
        delta = choice.get("delta")
        carried = False
        if delta:
            if not isinstance(delta, dict):
                raise FaultError(ErrorCategory.SCHEMA, f"event {index}: delta is not an object")
            draft = self.draft
            content = delta.get("content")
            if isinstance(content, str):
                draft.add_content(content)
                carried = content != ""
            reasoning = delta.get("reasoning_content")
            if not isinstance(reasoning, str):
                reasoning = delta.get("reasoning")
            if isinstance(reasoning, str):
                draft.add_reasoning(reasoning)
                carried = carried or reasoning != ""
            calls = delta.get("tool_calls")
            if isinstance(calls, list) and calls:
                for call in calls:
                    self._tools.add(call, f"event {index}")
                draft.tool_calls = self._tools.calls()
                carried = True
        elif delta is not None and not isinstance(delta, dict):
            raise FaultError(ErrorCategory.SCHEMA, f"event {index}: delta is not an object")
        tokens = 0
        logprobs = choice.get("logprobs")
        if logprobs is not None:
            kept = self.draft.logprobs
            entries = chat_logprobs(logprobs, len(kept) if kept is not None else 0)
            if kept is None:
                self.draft.logprobs = entries  # the list is built once and extended after
            else:
                kept.extend(entries)
            tokens = len(entries)
        return carried, tokens

    def _text_choice(self, choice: dict[str, Any]) -> tuple[bool, int]:
        text = choice.get("text")
        if isinstance(text, str):
            self.draft.add_content(text)
        logprobs = choice.get("logprobs")
        tokens = 0
        if isinstance(logprobs, dict):
            legacy = self.draft.legacy
            entries = legacy_logprobs(logprobs, len(legacy) if legacy is not None else 0)
            if legacy is None:
                self.draft.legacy = entries
            else:
                legacy.extend(entries)
            offsets = logprobs.get("text_offset")
            if isinstance(offsets, list):
                self.draft.text_offsets.extend(o for o in offsets if isinstance(o, int))
            tokens = len(entries)
        return isinstance(text, str) and bool(text), tokens


def _plain_content(chunk: dict[str, Any]) -> str | None:
    """The content string of the usual chat token chunk (one choice 0 whose delta is only a
    content string; no logprobs, finish reason, usage or error), else None."""
    choices = chunk.get("choices")
    if type(choices) is list and len(choices) == 1:
        choice = choices[0]
        if (
            type(choice) is dict
            and choice.get("logprobs") is None
            and choice.get("finish_reason") is None
            and choice.get("index", 0) == 0
            and "usage" not in chunk
            and "error" not in chunk
        ):
            delta = choice.get("delta")
            if type(delta) is dict and len(delta) == 1:
                content = delta.get("content")
                if type(content) is str and chunk.get("object") != "error":
                    return content
    return None


class _PlainDelta(msgspec.Struct, forbid_unknown_fields=True):
    content: str


class _PlainChoice(msgspec.Struct):
    delta: _PlainDelta
    index: Literal[0] = 0
    logprobs: None = None
    finish_reason: None = None


class _PlainChunk(msgspec.Struct):
    """The usual chat token chunk exactly as `_plain_content` takes it, checked by msgspec
    without building its dicts: one choice of index 0 whose delta is only a content string, no
    logprobs or finish reason, no `usage` or `error` key (null included), a string model if any.
    msgspec reads these fields as the dict decoder does (escaped key names, last duplicate key
    wins, other keys ignored). Whatever it refuses (an `object` other than a chat chunk's, too)
    takes the general path, which decides as before."""

    choices: tuple[_PlainChoice]
    model: str | msgspec.UnsetType = msgspec.UNSET
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    usage: msgspec.UnsetType = msgspec.UNSET
    error: msgspec.UnsetType = msgspec.UNSET


_decode_plain = msgspec.json.Decoder(_PlainChunk).decode
_decode = msgspec.json.Decoder().decode


def _loads(text: str) -> Any:
    """json.loads, ~4× cheaper for the usual event: msgspec's decoder gives the same values
    (integers of any size, last duplicate key wins) for standard JSON; what it refuses (NaN,
    Infinity, lone surrogate escapes, anything malformed) goes to json.loads to decide or raise,
    so exactly what json.loads accepts is accepted, with the same values."""
    try:
        return _decode(text)
    except ValueError:  # msgspec.DecodeError is a ValueError
        return json.loads(text)


def _message(data: str) -> str:
    try:
        return body_error(json.loads(data)) or data
    except ValueError:
        return data
