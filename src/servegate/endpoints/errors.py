"""Request failures as data: every failed request carries one category from this taxonomy.

Categories (FAULTS.md): infra (refused/DNS), timeout (no headers before the deadline), stalled
(headers then silence past the idle timeout), reset (connection dropped mid-body), rejected
(4xx), server (5xx), rate_limited (429/503 after the retry budget), error_body (HTTP 200 with an
error object), stream_error (an error event inside a stream), truncated (stream closed without
[DONE]), decode (invalid UTF-8), parse (data that is not JSON), schema (JSON of the wrong shape),
too_large (event or body over the size cap), protocol (wrong content type, redirect), tool_index
(ambiguous tool-call delta), non_finite_logprob, embedding_invalid, cancelled, tls (certificate
or handshake failure: never retried, never worked around by disabling verification), not_sent
(servegate chose not to send it: the side had timed out on several requests in a row).

Exceptions (the whole tree):
    Exception
    ├── EndpointError   misuse no retry can fix (bad URL, missing API key variable); exit code 2
    └── FaultError      internal: raised while reading a response, returned as RequestError
        └── sse.SSEFaultError   a parser fault, carrying the events completed before it
Server faults never escape an Endpoint as exceptions; cancellation propagates as CancelledError.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class ErrorCategory(StrEnum):
    INFRA = "infra"
    TIMEOUT = "timeout"
    STALLED = "stalled"
    RESET = "reset"
    REJECTED = "rejected"
    SERVER = "server"
    RATE_LIMITED = "rate_limited"
    ERROR_BODY = "error_body"
    STREAM_ERROR = "stream_error"
    TRUNCATED = "truncated"
    DECODE = "decode"
    PARSE = "parse"
    SCHEMA = "schema"
    TOO_LARGE = "too_large"
    PROTOCOL = "protocol"
    TOOL_INDEX = "tool_index"
    NON_FINITE_LOGPROB = "non_finite_logprob"
    EMBEDDING_INVALID = "embedding_invalid"
    CANCELLED = "cancelled"
    TLS = "tls"
    NOT_SENT = "not_sent"


# What counts as a hang, for every gate, the load generator and the answer classifier: no
# headers before the deadline (timeout) or silence after them past the idle timeout (stalled).
HUNG = frozenset({ErrorCategory.TIMEOUT, ErrorCategory.STALLED})


@dataclass(frozen=True, slots=True)
class RequestError:
    """Why one request failed; kept with the request, never raised past the endpoint."""

    category: ErrorCategory
    message: str
    status: int | None = None
    attempts: int = 1
    waited_s: float = 0.0
    body_excerpt: str = ""
    side: str = ""  # the endpoint's name ("baseline", "candidate")

    @property
    def hung(self) -> bool:
        """The request hung (servegate.endpoints.errors.HUNG)."""
        return self.category in HUNG


class EndpointError(Exception):
    """Raised only for misuse that no retry can fix (bad URL, missing API key variable)."""

    exit_code = 2


class FaultError(Exception):
    """Raised while a response is read or parsed; the endpoint turns it into a RequestError and
    returns it with whatever partial data was assembled. It never leaves the endpoint."""

    def __init__(self, category: ErrorCategory, message: str, *, body_excerpt: str = "") -> None:
        super().__init__(message)
        self.category = category
        self.message = message
        self.body_excerpt = body_excerpt
