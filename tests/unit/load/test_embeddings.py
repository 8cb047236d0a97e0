"""The embeddings bench against an in-process Endpoint, and its numbers on plain data."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Any

import pytest
from tests.unit.stub_endpoint import StubEndpoint

from servegate.endpoints.errors import ErrorCategory, RequestError
from servegate.endpoints.types import Completion, Embeddings, Timing, Usage
from servegate.load import BenchBounds, closed_loop, open_loop
from servegate.load.embeddings import (
    EmbeddingsWorkload,
    bench_embeddings,
    embeddings_request,
    summarise,
)

MS = 1_000_000


def answer(latency_ms: float, vectors: int = 1, dim: int = 4, tokens: int | None = 8) -> Embeddings:
    return Embeddings(
        status=200,
        vectors=tuple((1.0,) * dim for _ in range(vectors)),
        usage=None if tokens is None else Usage(prompt_tokens=tokens),
        timing=Timing(sent_ns=0, done_ns=int(latency_ms * MS)),
    )


def failure(category: ErrorCategory) -> Embeddings:
    return Embeddings(status=None, error=RequestError(category, "x"))


def test_a_step_counts_latency_inputs_tokens_errors_and_dimensions() -> None:
    results = [
        answer(100, vectors=2),
        answer(300, vectors=2),
        answer(200, vectors=2, dim=8),
        failure(ErrorCategory.TIMEOUT),
    ]
    m = summarise(results, duration_s=2.0, peak_concurrency=3)
    assert (m.sent, m.succeeded, m.failed) == (4, 3, 1)
    assert m.errors == {"timeout": 1}
    assert m.latency_ms.p50 == 200.0
    assert m.latency_ms.count == 3
    assert m.requests_per_s.value == 1.5
    assert m.inputs_per_s.value == 3.0
    assert m.prompt_tokens_per_s.value == 12.0
    assert (m.error_rate.value, m.timeout_rate.value) == (0.25, 0.25)
    assert m.dimensions == {"4": 2, "8": 1}


def test_token_throughput_is_not_measured_when_an_answer_has_no_usage() -> None:
    m = summarise([answer(100), answer(100, tokens=None)], duration_s=1.0, peak_concurrency=1)
    assert m.prompt_tokens_per_s.value is None
    assert m.prompt_tokens.count == 1


def test_request_i_is_always_the_same_inputs_and_no_input_repeats() -> None:
    spec = EmbeddingsWorkload(input_tokens=16, inputs_per_request=3, seed=5)
    first, again = embeddings_request(spec, "m", 7), embeddings_request(spec, "m", 7)
    assert first == again
    assert first["model"] == "m"
    texts = [t for i in range(4) for t in embeddings_request(spec, None, i)["input"]]  # type: ignore[union-attr]
    assert len(texts) == len(set(texts)) == 12


class FakeEndpoint(StubEndpoint):
    """Answers each embeddings request with one 4-float vector per input after `delay_s`."""

    def __init__(self, delay_s: float = 0.001) -> None:
        super().__init__("fake", "http://fake:8000/v1")
        self.delay_s = delay_s
        self.bodies: list[Mapping[str, Any]] = []
        self.in_flight = self.peak = 0

    async def embeddings(
        self, body: Mapping[str, Any], *, deadline_s: float | None = None
    ) -> Embeddings:
        self.bodies.append(body)
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        sent = time.perf_counter_ns()
        try:
            await asyncio.sleep(self.delay_s)
        finally:
            self.in_flight -= 1
        vectors = tuple((0.5, 0.5, 0.5, 0.5) for _ in body["input"])
        timing = Timing(sent_ns=sent, done_ns=time.perf_counter_ns())
        return Embeddings(status=200, vectors=vectors, usage=Usage(prompt_tokens=3), timing=timing)

    async def chat(self, body: Mapping[str, Any], *, deadline_s: float | None = None) -> Completion:
        raise NotImplementedError

    completion = chat


async def test_a_sweep_sends_warmup_then_each_step_with_fresh_inputs() -> None:
    ep = FakeEndpoint()
    spec = EmbeddingsWorkload(input_tokens=4, inputs_per_request=2)
    bounds = BenchBounds(requests=6, duration_s=30, deadline_s=5)
    result = await bench_embeddings(
        ep, model="m", workload=spec, arrivals=[closed_loop(3), open_loop(200.0)], bounds=bounds
    )
    closed, opened = result.steps
    assert (closed.label, closed.warmup, closed.metrics.sent) == ("c=3", 3, 6)
    assert (opened.warmup, opened.metrics.sent) == (1, 6)
    assert closed.metrics.peak_concurrency.value == 3
    assert closed.metrics.inputs_per_s.value is not None
    assert closed.metrics.dimensions == {"4": 6}
    assert len(ep.bodies) == 3 + 6 + 1 + 6
    # Request indices continue across steps (warm-ups included): request i is sent once.
    sent = sorted(ep.bodies, key=lambda body: [*body["input"]])
    expected = sorted((embeddings_request(spec, "m", i) for i in range(16)),
                      key=lambda body: [*body["input"]])  # fmt: skip
    assert sent == expected
    assert result.succeeded == 12
    assert result.kind == "servegate.bench.embeddings"


@pytest.mark.parametrize("bad", [{"input_tokens": 0}, {"inputs_per_request": 0}])
def test_a_workload_needs_at_least_one_token_and_one_input(bad: dict[str, int]) -> None:
    with pytest.raises(ValueError, match="greater than or equal to 1"):
        EmbeddingsWorkload(**bad)
