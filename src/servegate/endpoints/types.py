"""Value objects returned by an Endpoint: what came back and when, every state kept distinct."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from servegate.endpoints.errors import RequestError


@dataclass(frozen=True, slots=True)
class Timing:
    """Raw perf_counter_ns stamps of one request; metrics are derived, so they can be recomputed.

    `sent_ns` is when the request's last byte went to the connection, after any wait for a free
    pooled connection (and connect), which starts at `queued_ns`: client queueing is not TTFT.
    """

    sent_ns: int
    headers_ns: int | None = None
    done_ns: int | None = None
    # one stamp per token-carrying chunk (content, reasoning or tool-call delta), with its tokens
    token_chunk_ns: tuple[int, ...] = ()
    token_chunk_tokens: tuple[int, ...] = ()
    queued_ns: int | None = None  # when the call asked for a connection; None if not recorded

    @property
    def ttft_ms(self) -> float | None:
        """First token-carrying chunk minus request sent (non-streamed: the whole response)."""
        if self.token_chunk_ns:
            return (self.token_chunk_ns[0] - self.sent_ns) / 1e6
        if self.done_ns is not None:
            return (self.done_ns - self.sent_ns) / 1e6
        return None

    @property
    def e2el_ms(self) -> float | None:
        """Last token chunk (or end of body) minus request sent."""
        end = self.token_chunk_ns[-1] if self.token_chunk_ns else self.done_ns
        return None if end is None else (end - self.sent_ns) / 1e6


@dataclass(frozen=True, slots=True)
class Usage:
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    total_tokens: int | None = None
    cached_tokens: int | None = None


@dataclass(frozen=True, slots=True)
class ToolCall:
    index: int
    id: str | None
    name: str | None
    arguments: str  # raw string as joined from the wire; parse with json.loads where needed

    @property
    def arguments_valid(self) -> bool:
        """Whether `arguments` is a valid JSON object (servegate.endpoints.json_text)."""
        from servegate.endpoints.json_text import is_json_object

        return is_json_object(self.arguments)


@dataclass(frozen=True, slots=True)
class TokenLogprob:
    token: str
    logprob: float
    top: tuple[tuple[str, float], ...] = ()


@dataclass(frozen=True, slots=True)
class Completion:
    """One chat or text completion; `error` is set when the request failed (partial data kept)."""

    status: int | None
    content: str | None = None  # None = absent/null, "" = empty string: distinct states
    reasoning: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    finish_reason: str | None = None
    usage: Usage | None = None
    logprobs: tuple[TokenLogprob, ...] | None = None
    prompt_logprobs: tuple[TokenLogprob | None, ...] | None = None
    model: str | None = None
    timing: Timing = field(default_factory=lambda: Timing(sent_ns=0))
    error: RequestError | None = None
    # e.g. "buffered_stream", "usage_missing", "surrogates_cleaned", "no_done_after_finish"
    flags: tuple[str, ...] = ()
    raw: dict[str, Any] | None = None  # the non-streamed body, for evidence
    attempts: int = 1  # HTTP attempts made (retries of infra failures, 429 and 503 included)
    waited_s: float = 0.0  # time spent waiting between attempts

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def text(self) -> str:
        """Content as a string ('' when null/absent); use `content` to tell them apart."""
        return self.content or ""


@dataclass(frozen=True, slots=True)
class Embeddings:
    status: int | None
    vectors: tuple[tuple[float, ...], ...] = ()
    usage: Usage | None = None
    timing: Timing = field(default_factory=lambda: Timing(sent_ns=0))
    error: RequestError | None = None
    model: str | None = None
    attempts: int = 1
    waited_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass(frozen=True, slots=True)
class RawResponse:
    """A plain HTTP exchange: the escape hatch for probes the typed calls do not cover."""

    status: int | None
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    timing: Timing = field(default_factory=lambda: Timing(sent_ns=0))
    error: RequestError | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.status is not None and 200 <= self.status < 300

    def json(self) -> Any:
        import json

        return json.loads(self.body)
