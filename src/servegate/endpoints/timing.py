"""Timing of one request: a recorder of raw perf_counter_ns stamps and metrics derived from them.

Definitions (DESIGN.md, "Metric definitions"):
- TTFT = first chunk carrying a token (content, reasoning or tool-call delta) − request sent.
- E2EL = last token chunk − request sent. TPOT = (E2EL − TTFT) / (output_tokens − 1).
- ITL = gaps between token-carrying chunks, per chunk and per token (a chunk may carry several).
  GuideLLM's "ITL" is our TPOT.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from itertools import repeat
from operator import sub, truediv

from servegate.endpoints.types import Completion, Timing


@dataclass(slots=True)
class TimingRecorder:
    """Collects stamps while a response is read; `freeze()` gives the immutable Timing."""

    sent_ns: int = field(default_factory=time.perf_counter_ns)
    queued_ns: int | None = None
    headers_ns: int | None = None
    done_ns: int | None = None
    chunk_ns: list[int] = field(default_factory=list)
    chunk_tokens: list[int] = field(default_factory=list)

    def wrote(self) -> None:
        """Request bytes went to the connection: the request counts as sent from now."""
        self.sent_ns = time.perf_counter_ns()

    def token_chunk(self, arrival_ns: int, tokens: int) -> None:
        self.chunk_ns.append(arrival_ns)
        self.chunk_tokens.append(tokens)

    def freeze(self) -> Timing:
        return Timing(
            sent_ns=self.sent_ns,
            headers_ns=self.headers_ns,
            done_ns=self.done_ns,
            token_chunk_ns=tuple(self.chunk_ns),
            token_chunk_tokens=tuple(self.chunk_tokens),
            queued_ns=self.queued_ns,
        )


def itl_per_chunk_ms(timing: Timing) -> tuple[float, ...]:
    """Gaps between consecutive token-carrying chunks, in milliseconds."""
    stamps = timing.token_chunk_ns
    # (b - a) / 1e6 for each neighbouring pair, as C calls (every request's chunks pass here)
    return tuple(map(truediv, map(sub, stamps[1:], stamps), repeat(1e6)))


def itl_per_token_ms(timing: Timing) -> tuple[float, ...]:
    """Each chunk gap divided evenly over the tokens that chunk carried, one value per token."""
    stamps, counts = timing.token_chunk_ns, timing.token_chunk_tokens
    if max(counts[1 : len(stamps)], default=1) <= 1:
        return itl_per_chunk_ms(timing)  # one token per chunk: x / 1 is x, the same floats
    values: list[float] = []
    for i in range(1, len(stamps)):
        tokens = max(counts[i], 1) if i < len(counts) else 1
        values.extend([(stamps[i] - stamps[i - 1]) / 1e6 / tokens] * tokens)
    return tuple(values)


def streamed_tokens(timing: Timing) -> int:
    """Tokens counted over the token-carrying chunks."""
    return sum(timing.token_chunk_tokens)


def tpot_ms(timing: Timing, output_tokens: int | None = None) -> float | None:
    """(E2EL − TTFT) / (output_tokens − 1); None with fewer than two tokens."""
    tokens = streamed_tokens(timing) if output_tokens is None else output_tokens
    ttft, e2el = timing.ttft_ms, timing.e2el_ms
    if ttft is None or e2el is None or tokens < 2:
        return None
    return (e2el - ttft) / (tokens - 1)


def is_buffered(timing: Timing, *, ratio: float = 0.05, max_gap_ms: float = 1.0) -> bool:
    """A multi-chunk stream whose tokens all arrived at once (TTFT ≈ E2EL): a proxy or server
    buffered it, so TTFT and ITL measure nothing."""
    stamps = timing.token_chunk_ns
    if len(stamps) < 2:
        return False
    spread_ms = (stamps[-1] - stamps[0]) / 1e6
    e2el = (stamps[-1] - timing.sent_ns) / 1e6
    mean_gap_ms = spread_ms / (len(stamps) - 1)
    return spread_ms <= ratio * e2el and mean_gap_ms <= max_gap_ms


def output_tokens(completion: Completion) -> tuple[int | None, str]:
    """Output tokens and where the count came from: "usage", else "logprobs" (streamed or
    returned entries), else "estimated" (one per token-carrying chunk); None when unknown."""
    usage = completion.usage
    if usage is not None and usage.completion_tokens is not None:
        return usage.completion_tokens, "usage"
    if completion.logprobs:
        return len(completion.logprobs), "logprobs"
    if completion.timing.token_chunk_ns:
        return streamed_tokens(completion.timing), "estimated"
    return None, "estimated"
