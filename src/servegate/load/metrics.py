"""Load metrics, each defined once here and carried beside its number wherever it is shown.

Definitions follow DESIGN.md "Metric definitions"; the per-request timing comes from
`servegate.endpoints.timing` (raw perf_counter_ns stamps). Latencies are taken over successful
requests only; failures are counted, by category, beside them. Where GuideLLM or
`vllm bench serve` use the same name for something else, the definition says so.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import chain

from pydantic import BaseModel, ConfigDict

from servegate.endpoints.errors import HUNG, ErrorCategory
from servegate.endpoints.timing import itl_per_chunk_ms, itl_per_token_ms, output_tokens, tpot_ms
from servegate.endpoints.types import Completion
from servegate.load.slo import SLO
from servegate.stats.distribution import DistributionSummary

__all__ = [
    "DEFINITIONS",
    "Distribution",
    "RequestMeasure",
    "Scalar",
    "StepMetrics",
    "measure",
    "summarise",
]

DEFINITIONS: dict[str, str] = {
    "ttft_ms": "first chunk carrying a token (content, reasoning or tool-call delta) − request "
    "sent; an empty role chunk does not count (vllm bench serve and GuideLLM: TTFT, same idea)",
    "tpot_ms": "(E2EL − TTFT) / (output_tokens − 1), per request with at least 2 output tokens "
    "(vllm bench serve: TPOT, same; GuideLLM calls this ITL, inter_token_latency, while its "
    "time_per_output_token divides the whole latency, TTFT included)",
    "itl_chunk_ms": "gap between consecutive token-carrying chunks of one response (vllm bench "
    "serve's ITL, which treats each chunk as one token)",
    "itl_token_ms": "each chunk gap divided evenly over the tokens that chunk carried, one value "
    "per token (a chunk may carry several tokens; its count comes from its logprob entries or "
    "the growth of a cumulative usage — requests where neither told it and the final usage "
    "disagrees with one token per chunk are left out and counted in itl_token_unknown)",
    "e2el_ms": "last token-carrying chunk − request sent (vllm bench serve's E2EL runs to the end "
    "of the stream, usage and [DONE] included; GuideLLM: request_latency)",
    "output_tokens": "usage.completion_tokens, else the streamed logprob entries, else one per "
    "token-carrying chunk (then marked estimated)",
    "prompt_tokens": "usage.prompt_tokens as the server counted it (chat template included)",
    "duration_s": "first measured request due or sent → last measured request finished "
    "(warm-up excluded)",
    "requests_per_s": "successful requests / duration_s",
    "output_tokens_per_s": "output tokens of successful requests / duration_s",
    "goodput_rps": "successful requests meeting every SLO (ttft_ms, tpot_ms, e2el_ms) / "
    "duration_s; a 1-token answer meets a TPOT bound vacuously (vllm bench serve: goodput, same)",
    "error_rate": "failed requests / requests sent",
    "timeout_rate": "requests that passed the request deadline or stalled / requests sent",
    "peak_concurrency": "most requests in flight at once during the measured phase",
}


@dataclass(frozen=True, slots=True)
class RequestMeasure:
    """What one request's result says, derived from its Completion (pure, recomputable)."""

    ok: bool
    error: ErrorCategory | None
    ttft_ms: float | None
    e2el_ms: float | None
    tpot_ms: float | None
    itl_chunk_ms: tuple[float, ...]
    itl_token_ms: tuple[float, ...]
    output_tokens: int | None
    token_source: str
    prompt_tokens: int | None
    buffered: bool
    token_split_known: bool  # every chunk's token count was reported, or confirmed by usage


def measure(completion: Completion) -> RequestMeasure:
    """The request's metrics. A stream with no token-carrying chunk has no TTFT or E2EL."""
    timing = completion.timing
    tokens, source = output_tokens(completion)
    has_tokens = bool(timing.token_chunk_ns)
    # One token per chunk is only a guess when nothing reported the chunk's count; usage that
    # adds up to the chunks confirms it, anything else leaves the per-token split unknown.
    split_known = "chunk_tokens_estimated" not in completion.flags or (
        source == "usage" and tokens == sum(timing.token_chunk_tokens)
    )
    usage = completion.usage
    return RequestMeasure(
        ok=completion.ok,
        error=completion.error.category if completion.error is not None else None,
        ttft_ms=timing.ttft_ms if has_tokens else None,
        e2el_ms=timing.e2el_ms if has_tokens else None,
        tpot_ms=tpot_ms(timing, tokens) if has_tokens and tokens is not None else None,
        itl_chunk_ms=itl_per_chunk_ms(timing),
        itl_token_ms=itl_per_token_ms(timing) if split_known else (),
        output_tokens=tokens,
        token_source=source if tokens is not None else "unknown",
        prompt_tokens=usage.prompt_tokens if usage is not None else None,
        buffered="buffered_stream" in completion.flags,
        token_split_known=split_known,
    )


class Distribution(BaseModel):
    """A metric's summary over a sample, with its definition beside it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    definition: str
    count: int
    mean: float | None
    p50: float | None
    p90: float | None
    p95: float | None
    p99: float | None
    min: float | None
    max: float | None

    @classmethod
    def of(cls, name: str, values: Iterable[float]) -> Distribution:
        s = DistributionSummary.from_values(values)
        return cls(
            definition=DEFINITIONS[name],
            count=s.count,
            mean=s.mean,
            p50=s.p50,
            p90=s.p90,
            p95=s.p95,
            p99=s.p99,
            min=s.min,
            max=s.max,
        )


class Scalar(BaseModel):
    """One number with its definition; `value` None when it could not be measured."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    definition: str
    value: float | None

    @classmethod
    def of(cls, name: str, value: float | None) -> Scalar:
        return cls(definition=DEFINITIONS[name], value=value)


class StepMetrics(BaseModel):
    """The numbers of one measured step (warm-up excluded)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    sent: int
    succeeded: int
    failed: int
    errors: dict[str, int]  # failures by category
    duration_s: Scalar
    requests_per_s: Scalar
    output_tokens_per_s: Scalar
    goodput_rps: Scalar  # value None when no SLO was given
    error_rate: Scalar
    timeout_rate: Scalar
    peak_concurrency: Scalar
    ttft_ms: Distribution
    tpot_ms: Distribution
    itl_chunk_ms: Distribution
    itl_token_ms: Distribution
    itl_token_unknown: int  # successful requests left out of itl_token_ms
    e2el_ms: Distribution
    output_tokens: Distribution
    output_token_sources: dict[str, int]  # successful requests by where their count came from
    output_tokens_estimated: bool  # some count was estimated from chunks
    prompt_tokens: Distribution
    slo_met: int | None
    buffered_streams: int  # streams whose tokens all arrived at once: TTFT/ITL measure nothing


def _rate(count: float, duration_s: float) -> float | None:
    return count / duration_s if duration_s > 0 else None


def summarise(
    measures: Sequence[RequestMeasure],
    *,
    duration_s: float,
    peak_concurrency: int,
    slo: SLO | None = None,
) -> StepMetrics:
    """Summarise one step's requests; rates are per second of `duration_s`."""
    good = [m for m in measures if m.ok]
    failed = [m for m in measures if not m.ok]
    sent = len(measures)
    tokens = sum(m.output_tokens or 0 for m in good)
    met = None if slo is None else sum(slo.met(m.ttft_ms, m.tpot_ms, m.e2el_ms) for m in good)
    timeouts = sum(m.error in HUNG for m in failed)
    sources = Counter(m.token_source for m in good)

    def values(attr: str) -> list[float]:
        return [v for m in good if (v := getattr(m, attr)) is not None]

    return StepMetrics(
        sent=sent,
        succeeded=len(good),
        failed=len(failed),
        errors=dict(Counter(str(m.error) for m in failed)),
        duration_s=Scalar.of("duration_s", duration_s),
        requests_per_s=Scalar.of("requests_per_s", _rate(len(good), duration_s)),
        output_tokens_per_s=Scalar.of("output_tokens_per_s", _rate(tokens, duration_s)),
        goodput_rps=Scalar.of("goodput_rps", None if met is None else _rate(met, duration_s)),
        error_rate=Scalar.of("error_rate", len(failed) / sent if sent else None),
        timeout_rate=Scalar.of("timeout_rate", timeouts / sent if sent else None),
        peak_concurrency=Scalar.of("peak_concurrency", float(peak_concurrency)),
        ttft_ms=Distribution.of("ttft_ms", values("ttft_ms")),
        tpot_ms=Distribution.of("tpot_ms", values("tpot_ms")),
        itl_chunk_ms=Distribution.of(
            "itl_chunk_ms", chain.from_iterable(m.itl_chunk_ms for m in good)
        ),
        itl_token_ms=Distribution.of(
            "itl_token_ms", chain.from_iterable(m.itl_token_ms for m in good)
        ),
        itl_token_unknown=sum(not m.token_split_known for m in good),
        e2el_ms=Distribution.of("e2el_ms", values("e2el_ms")),
        output_tokens=Distribution.of("output_tokens", (float(v) for v in values("output_tokens"))),
        output_token_sources=dict(sources),
        output_tokens_estimated=sources.get("estimated", 0) > 0,
        prompt_tokens=Distribution.of("prompt_tokens", (float(v) for v in values("prompt_tokens"))),
        slo_met=met,
        buffered_streams=sum(m.buffered for m in good),
    )
