"""The contract between `servegate proxy` (which serves user requests) and a canary controller
(which decides which side serves each one and judges the candidate interval by interval).

The proxy asks `choose(u)` for every routable request, serves it from that side (the user gets
that side's answer), measures it and hands one `RequestObservation` to `observe`. The
controller judges intervals in `run`, moves its weight step by step or back to 0, and records
every decision.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol

Side = Literal["primary", "candidate", "secondary"]

# Per-request values the proxy measures; a name absent from `RequestObservation.metrics` was not
# measured for that request (a JSON parse failure is only measured when the request asked for JSON).
METRICS: Mapping[str, str] = {
    "error": "1 when the answer is not ok by the one answer classifier "
    "(servegate.endpoints.answers): HTTP status >= 400, transport failure, timeout, abandoned "
    "by the client, HTTP 200 error body, error event in the stream, stream cut before [DONE] or "
    "without a finish_reason, empty answer, degenerate text, invalid JSON where JSON was asked, "
    "invalid tool-call arguments; else 0",
    "timeout": "1 when the side did not answer in time: its deadline passed, it went silent "
    "mid-stream, or the client gave up waiting (abandoned); else 0",
    "ttft_ms": "first chunk carrying a token - request forwarded, ms (streamed requests only)",
    "e2el_ms": "last byte of the answer - request forwarded, ms",
    "empty_output": "1 when a successful answer has no text and no tool call; else 0",
    "repeated_token_ratio": "share of the answer's tokens that repeat the token before, 0..1",
    "abnormal_char_ratio": "share of the answer's characters that are replacement, control or "
    "private-use characters, 0..1",
    "garbage": "1 when the answer is degenerate (the probes' degeneration check); else 0",
    "json_parse_failure": "1 when a request asking for JSON got text that does not parse; else 0",
    "tool_call_parse_failure": "1 when a tool call's arguments do not parse as JSON; else 0",
}
# Besides METRICS, each observation carries `answer_<class>` = 1 for its answer's class
# (servegate.endpoints.answers.AnswerClass): what the error was, for the evidence and /metrics.
ANSWER_PREFIX = "answer_"


@dataclass(frozen=True)
class RequestObservation:
    """One user request, served by `side`, as the proxy measured it."""

    side: Side
    at: float  # time.time() when the answer completed
    metrics: Mapping[str, float]  # names from METRICS


class CanaryController(Protocol):
    def choose(self, u: float) -> Side:
        """The side that serves a request, given `u` drawn uniformly from [0, 1)."""
        ...

    def observe(self, observation: RequestObservation) -> None:
        """Take one served request into the current interval (never blocks, never raises)."""
        ...

    async def run(self, stop: asyncio.Event) -> None:
        """Judge interval after interval until `stop` is set or the canary has finished."""
        ...

    async def finish(self, reason: str, evidence: Mapping[str, Any]) -> object:
        """End the canary for good (the rollout system is done with the workloads): every
        request to the primary from now on, recorded with `reason` and `evidence`."""
        ...

    def snapshot(self) -> Mapping[str, Any]:
        """JSON-able state: step, weight, phase (progressing|promoted|rolled_back|finalised), last
        decision with its evidence — what /metrics, the Flagger webhook and the CLI show."""
        ...
