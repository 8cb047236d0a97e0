"""What to do with one HTTP response once headers arrive, per kind of call.

Each reception keeps its partial state, so a fault at any point (deadline, stall, reset, a bad
event) still returns what was assembled before it, with the error attached.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping
from typing import Any, Protocol, TypeVar

from servegate.endpoints.assembly import StreamAssembler
from servegate.endpoints.body import completion_draft, decode_json, embeddings_of
from servegate.endpoints.draft import CompletionDraft, RequestContext, body_error
from servegate.endpoints.errors import ErrorCategory, FaultError, RequestError
from servegate.endpoints.sse import SSEParser
from servegate.endpoints.text import FINDING_CHARS, excerpt
from servegate.endpoints.timing import TimingRecorder, is_buffered
from servegate.endpoints.transport import Body, ResponseHead, TimeoutConfig
from servegate.endpoints.types import Completion, Embeddings, RawResponse

R_co = TypeVar("R_co", covariant=True)
ERROR_BODY_BYTES = 64 * 1024


class Reception(Protocol[R_co]):
    async def receive(self, response: ResponseHead, reader: Body, recorder: TimingRecorder) -> R_co:
        """Read the response and build the result; raises FaultError."""
        ...

    def fail(self, error: RequestError, recorder: TimingRecorder) -> R_co:
        """The result for a failed attempt, keeping whatever was assembled."""
        ...


def _is_json(content_type: str) -> bool:
    return content_type == "application/json" or content_type.endswith("+json")


async def status_fault(response: ResponseHead, reader: Body) -> FaultError:
    """A non-2xx answer as a fault: 3xx PROTOCOL (never followed), 429/503 RATE_LIMITED,
    other 4xx REJECTED, 5xx SERVER; the server's message and a bounded excerpt kept."""
    status = response.status
    body = b""
    try:
        while len(body) < ERROR_BODY_BYTES:
            data, _ = await reader.chunk()
            if not data:
                break
            body += data
    except FaultError:
        pass  # the status already says what happened; a broken error body adds nothing
    message = ""
    with contextlib.suppress(FaultError):
        message = body_error(decode_json(body)) or ""
    detail = f": {excerpt(message, FINDING_CHARS)}" if message else ""
    if 300 <= status < 400:
        where = response.headers.get("Location", "")
        target = excerpt(where.split("?", 1)[0], FINDING_CHARS)
        return FaultError(
            ErrorCategory.PROTOCOL, f"HTTP {status} redirect to {target} (not followed)"
        )
    if status in (429, 503):
        category = ErrorCategory.RATE_LIMITED
    elif 400 <= status < 500:
        category = ErrorCategory.REJECTED
    elif status >= 500:
        category = ErrorCategory.SERVER
    else:
        category = ErrorCategory.PROTOCOL
    return FaultError(category, f"HTTP {status}{detail}", body_excerpt=excerpt(body))


def _failed_now(recorder: TimingRecorder) -> None:
    if recorder.done_ns is None:
        recorder.done_ns = time.perf_counter_ns()


class CompletionReception:
    """Chat or text completion, streamed (SSE) or not."""

    def __init__(
        self, body: Mapping[str, Any], *, chat: bool, timeouts: TimeoutConfig, max_bytes: int
    ) -> None:
        self.streaming = bool(body.get("stream"))
        self._ctx = RequestContext.of(body, streaming=self.streaming)
        self._chat = chat
        self._timeouts = timeouts
        self._max_bytes = max_bytes
        self._draft = CompletionDraft()
        self._status: int | None = None

    async def receive(
        self, response: ResponseHead, reader: Body, recorder: TimingRecorder
    ) -> Completion:
        self._status = response.status
        if not 200 <= response.status < 300:
            raise await status_fault(response, reader)
        content_type = response.content_type
        if self.streaming and content_type == "text/event-stream":
            await self._stream(reader, recorder)
        elif _is_json(content_type) or (
            not self.streaming and content_type in ("application/octet-stream", "text/plain")
        ):
            data, recorder.done_ns = await reader.read_all(self._max_bytes)
            self._draft = completion_draft(decode_json(data), chat=self._chat)
            if self.streaming:
                raise FaultError(
                    ErrorCategory.PROTOCOL, f"asked for a stream, got {content_type} with a body"
                )
        else:
            head, _ = await reader.chunk()
            raise FaultError(
                ErrorCategory.PROTOCOL,
                f"unexpected content type {content_type!r}",
                body_excerpt=excerpt(head),
            )
        timing = recorder.freeze()
        if self.streaming and is_buffered(timing):
            self._draft.flags.add("buffered_stream")
        return self._draft.finish(self._ctx, status=self._status, timing=timing)

    async def _stream(self, reader: Body, recorder: TimingRecorder) -> None:
        parser = SSEParser(max_event_bytes=self._max_bytes)
        assembler = StreamAssembler(recorder, chat=self._chat)
        self._draft = assembler.draft

        def intake(data: bytes, arrival_ns: int) -> None:
            parser.feed_into(data, arrival_ns, assembler)

        def done() -> bool:
            return assembler.done

        arrival = 0
        try:
            arrival = await reader.pump(intake, self._timeouts.done_grace_s, done)
            parser.close_into(arrival, assembler)
        except FaultError:
            if not assembler.done:
                raise
            self._draft.flags.add("unclean_end_after_done")
        if parser.comments:
            self._draft.flags.add("keepalive_comments")
        if assembler.done and self._draft.finish_reason is None:
            # A stream is complete only when it says so: `[DONE]` without a finish_reason is an
            # answer cut short (stock llama-cpp-python ends a stream it interrupted for a newer
            # request exactly so: HTTP 200, no content, `[DONE]`), an error of its side.
            raise FaultError(
                ErrorCategory.TRUNCATED,
                f"stream ended with [DONE] after {assembler.events} events but no finish_reason: "
                "the answer was cut short",
            )
        if not assembler.done:
            recorder.done_ns = arrival
            if self._draft.finish_reason is not None and "unterminated_event" not in (
                self._draft.flags
            ):
                # The answer ended (finish_reason sent) and the body closed at an event boundary:
                # a server that never sends the terminator (transformers serve 5.24), not a cut.
                self._draft.flags.add("no_done_after_finish")
                return
            raise FaultError(
                ErrorCategory.TRUNCATED,
                f"stream closed after {assembler.events} events without [DONE]",
            )

    def fail(self, error: RequestError, recorder: TimingRecorder) -> Completion:
        _failed_now(recorder)
        timing = recorder.freeze()
        return self._draft.finish(self._ctx, status=self._status, timing=timing, error=error)


class EmbeddingsReception:
    def __init__(self, body: Mapping[str, Any], *, timeouts: TimeoutConfig, max_bytes: int) -> None:
        self._body = body
        self._timeouts = timeouts
        self._max_bytes = max_bytes
        self._status: int | None = None

    async def receive(
        self, response: ResponseHead, reader: Body, recorder: TimingRecorder
    ) -> Embeddings:
        self._status = response.status
        if not 200 <= response.status < 300:
            raise await status_fault(response, reader)
        data, recorder.done_ns = await reader.read_all(self._max_bytes)
        obj = decode_json(data)
        vectors, usage = embeddings_of(obj, self._body)
        model = obj.get("model") if isinstance(obj, dict) else None
        return Embeddings(
            status=response.status,
            vectors=vectors,
            usage=usage,
            timing=recorder.freeze(),
            model=model if isinstance(model, str) else None,
        )

    def fail(self, error: RequestError, recorder: TimingRecorder) -> Embeddings:
        _failed_now(recorder)
        return Embeddings(status=self._status, timing=recorder.freeze(), error=error)


class RawReception:
    """Any status is an answer here; only transport faults and oversize bodies are errors."""

    def __init__(self, *, timeouts: TimeoutConfig, max_bytes: int) -> None:
        self._timeouts = timeouts
        self._max_bytes = max_bytes
        self._status: int | None = None
        self._headers: dict[str, str] = {}

    async def receive(
        self, response: ResponseHead, reader: Body, recorder: TimingRecorder
    ) -> RawResponse:
        self._status = response.status
        self._headers = dict(response.headers)
        body, recorder.done_ns = await reader.read_all(self._max_bytes)
        return RawResponse(
            status=response.status, headers=self._headers, body=body, timing=recorder.freeze()
        )

    def fail(self, error: RequestError, recorder: TimingRecorder) -> RawResponse:
        _failed_now(recorder)
        return RawResponse(
            status=self._status, headers=self._headers, timing=recorder.freeze(), error=error
        )
