"""One upstream exchange as the proxy saw it (status, headers, bytes with their arrival stamps)
and the Completion read back from it with the endpoints' own SSE parser and assembler, so a
proxied answer is read exactly as the gates read one."""

from __future__ import annotations

import contextlib
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from servegate.endpoints.assembly import StreamAssembler
from servegate.endpoints.body import completion_draft, decode_json
from servegate.endpoints.draft import CompletionDraft, RequestContext, body_error
from servegate.endpoints.errors import ErrorCategory, FaultError, RequestError
from servegate.endpoints.sse import DEFAULT_MAX_EVENT_BYTES, SSEParser
from servegate.endpoints.text import FINDING_CHARS, excerpt
from servegate.endpoints.timing import TimingRecorder
from servegate.endpoints.types import Completion
from servegate.proxy.limits import ByteBudget

CHAT_PATH = "/v1/chat/completions"
COMPLETIONS_PATH = "/v1/completions"
EMBEDDINGS_PATH = "/v1/embeddings"
MIRRORED_PATHS = frozenset({CHAT_PATH, COMPLETIONS_PATH, EMBEDDINGS_PATH})
GENERATION_PATHS = frozenset({CHAT_PATH, COMPLETIONS_PATH})


@dataclass(slots=True)
class Exchange:
    """What came back for one request; `error` is set for a transport failure or a timeout
    (`timed_out`), `truncated` when more bytes came than were kept for reading."""

    sent_ns: int
    status: int | None = None
    headers: dict[str, str] = field(default_factory=dict)
    chunks: list[bytes] = field(default_factory=list)
    arrivals_ns: list[int] = field(default_factory=list)
    kept_bytes: int = 0
    truncated: bool = False
    done_ns: int | None = None
    error: str | None = None
    timed_out: bool = False
    client_gone: bool = False  # the user disconnected before the answer was complete

    def keep(
        self, data: bytes, arrival_ns: int, limit: int, budget: ByteBudget | None = None
    ) -> None:
        """Keep one chunk for reading later, up to `limit` bytes in all and while `budget` (the
        bytes all requests in flight may hold) has room; past either, none is kept."""
        if self.truncated:
            return
        if self.kept_bytes + len(data) > limit or (
            budget is not None and not budget.take(len(data))
        ):
            self.truncated = True
            return
        self.chunks.append(data)
        self.arrivals_ns.append(arrival_ns)
        self.kept_bytes += len(data)

    @property
    def longest_wait_ns(self) -> int:
        """The longest time without a byte: before the first chunk, or between two."""
        last, longest = self.sent_ns, 0
        for at in self.arrivals_ns:
            longest, last = max(longest, at - last), at
        return longest

    @property
    def body(self) -> bytes:
        return b"".join(self.chunks)

    @property
    def failed(self) -> bool:
        """The transport's failure: HTTP >= 500, connection error or timeout (the answer's own
        class, content included, is `content.classify_exchange`'s)."""
        return self.error is not None or (self.status is not None and self.status >= 500)

    def as_record(self, max_chars: int = 65_536) -> dict[str, Any]:
        """JSON-able summary for the store (not yet redacted)."""
        return {
            "status": self.status,
            "content_type": self.headers.get("content-type"),
            "body": self.body.decode("utf-8", "replace")[:max_chars],
            "body_bytes": self.kept_bytes,
            "truncated": self.truncated,
            "error": self.error,
            "timed_out": self.timed_out,
            "e2el_ms": None if self.done_ns is None else (self.done_ns - self.sent_ns) / 1e6,
        }


def completion_of(exchange: Exchange, path: str, request: Mapping[str, Any]) -> Completion | None:
    """The Completion in a chat/completions exchange, or None for another path or a body too
    large to have been kept (not measured)."""
    if path not in GENERATION_PATHS or exchange.truncated:
        return None
    chat = path == CHAT_PATH
    streaming = bool(request.get("stream"))
    recorder = TimingRecorder(sent_ns=exchange.sent_ns)
    recorder.done_ns = exchange.done_ns
    ctx = RequestContext.of(request, streaming=streaming)
    draft = CompletionDraft()
    try:
        if exchange.error is not None:
            category = (
                ErrorCategory.CANCELLED
                if exchange.client_gone
                else ErrorCategory.TIMEOUT
                if exchange.timed_out
                else ErrorCategory.INFRA
            )
            raise FaultError(category, exchange.error)
        if exchange.status is None or not 200 <= exchange.status < 300:
            message = ""
            with contextlib.suppress(FaultError):
                message = body_error(decode_json(exchange.body)) or ""
            category = (
                ErrorCategory.SERVER
                if exchange.status is not None and exchange.status >= 500
                else ErrorCategory.REJECTED
            )
            raise FaultError(category, f"HTTP {exchange.status}: {excerpt(message, FINDING_CHARS)}")
        content_type = exchange.headers.get("content-type", "").split(";")[0].strip()
        chunks = decoded_chunks(exchange)
        if streaming and content_type == "text/event-stream":
            draft = _assemble(chunks, exchange.arrivals_ns, exchange.sent_ns, recorder, chat=chat)
        else:
            draft = completion_draft(decode_json(b"".join(chunks)), chat=chat)
    except FaultError as exc:
        error = RequestError(exc.category, exc.message, status=exchange.status)
        return draft.finish(ctx, status=exchange.status, timing=recorder.freeze(), error=error)
    return draft.finish(ctx, status=exchange.status, timing=recorder.freeze())


# Content codings the proxy reads (and so the only ones it lets the primary use, forwarding.py).
READABLE_ENCODINGS = ("gzip", "x-gzip", "deflate")
# The most an answer may inflate to: past it, the answer is FAIL(too_large) for its side — a
# compressed body that inflates without bound (a gzip bomb) costs at most this much memory.
MAX_DECODED_BYTES = DEFAULT_MAX_EVENT_BYTES


def decoded_chunks(exchange: Exchange, max_bytes: int = MAX_DECODED_BYTES) -> list[bytes]:
    """The kept chunks as the user's client reads them: gzip or deflate undone chunk by chunk
    (each keeps its arrival time), never more than `max_bytes` in all (FAIL(too_large) past it);
    any other content coding is FAIL(decode)."""
    coding = exchange.headers.get("content-encoding", "identity").strip().lower()
    if coding in ("", "identity") or not exchange.chunks:
        return exchange.chunks
    if coding not in READABLE_ENCODINGS:
        raise FaultError(ErrorCategory.DECODE, f"content-encoding {coding!r} is not readable")
    for wbits in (47, -15):  # gzip or zlib (auto-detected), then raw deflate
        try:
            return _inflated(exchange.chunks, wbits, max_bytes, coding)
        except zlib.error:
            continue
    raise FaultError(ErrorCategory.DECODE, f"the {coding} body does not decompress")


def _inflated(chunks: list[bytes], wbits: int, max_bytes: int, coding: str) -> list[bytes]:
    unpacker = zlib.decompressobj(wbits=wbits)
    out: list[bytes] = []
    size = 0

    def room() -> int:
        # one byte past the cap, so that reaching it is told apart from passing it
        return max_bytes - size + 1

    for chunk in chunks:
        data = unpacker.decompress(chunk, room())
        size += len(data)
        if size > max_bytes or unpacker.unconsumed_tail:
            raise FaultError(
                ErrorCategory.TOO_LARGE,
                f"the {coding} answer inflates past {max_bytes} bytes ({sum(map(len, chunks))} "
                "bytes compressed); decompression stopped there",
            )
        out.append(data)
    tail = unpacker.flush()
    if size + len(tail) > max_bytes:
        raise FaultError(
            ErrorCategory.TOO_LARGE, f"the {coding} answer inflates past {max_bytes} bytes"
        )
    out[-1:] = [(out[-1] if out else b"") + tail]
    return out


def _assemble(
    chunks: list[bytes], arrivals_ns: list[int], sent_ns: int, recorder: TimingRecorder,
    *, chat: bool,
) -> CompletionDraft:  # fmt: skip
    parser = SSEParser()
    assembler = StreamAssembler(recorder, chat=chat)
    last = sent_ns
    for data, arrival in zip(chunks, arrivals_ns, strict=True):
        parser.feed_into(data, arrival, assembler)
        last = arrival
    parser.close_into(last, assembler)
    if not assembler.done:
        raise FaultError(
            ErrorCategory.TRUNCATED, f"stream closed after {assembler.events} events without [DONE]"
        )
    return assembler.draft
