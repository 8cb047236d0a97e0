"""Golden sends as many probes at once as both sides batch: a server that answers four requests
together about as fast as one gets four at a time; one that serves one at a time gets one.

The two servers here are fakes through the Endpoint interface (no real server can be made to
batch or not on demand on this machine: the reference engine never batches, vLLM always does;
both are measured in tests/integration and benchmarks/RESULTS-time.md)."""

import asyncio
from collections.abc import Mapping
from typing import Any

import pytest
from tests.unit.stub_endpoint import StubEndpoint

from servegate.config.models import GateConfig
from servegate.endpoints.errors import ErrorCategory, RequestError
from servegate.endpoints.types import Completion, Timing
from servegate.gates import batching
from servegate.gates.golden.collect import collect
from servegate.gates.pair import EndpointPair

LATENCY_S = 0.2


class Server(StubEndpoint):
    """Answers every request after LATENCY_S; `serial` ones take requests one at a time (a lock,
    as llama-cpp-python does). Counts the requests in flight, the isolation ones aside."""

    def __init__(self, name: str, *, serial: bool, fail: bool = False) -> None:
        super().__init__(name, raw_status=404)  # serves no Responses API
        self.fail = fail
        self._lock = asyncio.Lock() if serial else None
        self.in_flight = self.most_in_flight = 0
        # (the chat request's messages, the requests in flight when it came in, itself included)
        self.starts: list[tuple[str, int]] = []

    async def _answer(self, body: Mapping[str, Any]) -> Completion:
        self.in_flight += 1
        if "messages" in body:
            self.starts.append((str(body["messages"]), self.in_flight))
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            if self._lock is None:
                await asyncio.sleep(LATENCY_S)
            else:
                async with self._lock:
                    await asyncio.sleep(LATENCY_S)
        finally:
            self.in_flight -= 1
        if self.fail:
            error = RequestError(ErrorCategory.SERVER, "HTTP 500", side=self._name)
            return Completion(status=500, content=None, error=error)
        return Completion(status=200, content="OK", finish_reason="stop", timing=Timing(1, 2, 3))

    async def completion(
        self, body: Mapping[str, Any], *, deadline_s: float | None = None
    ) -> Completion:
        if body.get("prompt") == "0":  # the isolation request
            return Completion(status=200, content="0")
        return await self._answer(body)

    async def chat(self, body: Mapping[str, Any], *, deadline_s: float | None = None) -> Completion:
        return await self._answer(body)


def _measure(server: Server) -> batching.Batching:
    pair = EndpointPair(server, server)
    return asyncio.run(batching.measure(pair, server, gate="golden", deadline_s=10))


@pytest.mark.timed  # wall-clock seconds decide: run alone (scripts/test.sh)
def test_a_server_that_answers_four_together_as_fast_as_one_batches() -> None:
    m = _measure(Server("b", serial=False))
    assert m.batches, m.why
    assert m.together_s is not None
    assert m.alone_s is not None
    assert m.together_s < 2 * m.alone_s


@pytest.mark.timed  # wall-clock seconds decide: run alone (scripts/test.sh)
def test_a_server_that_takes_one_request_at_a_time_does_not() -> None:
    m = _measure(Server("s", serial=True))
    assert not m.batches, m.why
    assert m.together_s is not None
    assert m.alone_s is not None
    assert m.together_s >= 3 * m.alone_s  # the fourth waited for three
    assert "serves one at a time" in m.why


def test_a_side_that_fails_the_measuring_requests_is_sent_one_at_a_time() -> None:
    m = _measure(Server("f", serial=False, fail=True))
    assert not m.batches
    assert m.why.startswith("5 of 5 measuring requests not answered")


@pytest.mark.parametrize(
    ("alone", "together", "batches"), [(1.0, 1.9, True), (1.0, 2.0, True), (1.0, 2.1, False)]
)
def test_the_line_is_twice_the_time_of_one_alone(
    alone: float, together: float, batches: bool
) -> None:
    ok = Completion(status=200, content="OK")
    m = batching.judge("side", 4, (ok, alone), ([ok] * 4, together))
    assert m.batches is batches


def _golden(baseline: Server, candidate: Server, **settings: Any) -> Any:
    settings = {"golden_concurrency": "auto", **settings}
    cfg = GateConfig.model_validate(
        {"baseline": {"url": baseline.base_url}, "candidate": {"url": candidate.base_url},
         "categories": ["canary"], **settings}
    )  # fmt: skip
    return asyncio.run(collect(EndpointPair(baseline, candidate), cfg))


@pytest.mark.timed  # wall-clock seconds decide: run alone (scripts/test.sh)
def test_golden_sends_four_probes_at_once_when_both_sides_batch_and_keeps_suite_order() -> None:
    b, c = Server("b", serial=False), Server("c", serial=False)
    ev = _golden(b, c)
    assert ev.concurrency == batching.WIDTH
    assert [m.batches for m in ev.batching] == [True, True]
    assert b.most_in_flight == c.most_in_flight == batching.WIDTH
    ids = [o.probe.id for o in ev.observations]
    from servegate.gates.golden.collect import select_probes

    assert ids == [p.id for p in select_probes(GateConfig.model_validate(
        {"baseline": {"url": "http://b/v1"}, "candidate": {"url": "http://c/v1"},
         "categories": ["canary"]})).probes]  # fmt: skip
    assert len(ids) > batching.WIDTH  # more probes than slots: the slots were reused


@pytest.mark.timed  # wall-clock seconds decide: run alone (scripts/test.sh)
def test_golden_sends_one_probe_at_a_time_when_either_side_serves_one_at_a_time() -> None:
    b, c = Server("b", serial=False), Server("c", serial=True)
    ev = _golden(b, c)
    assert ev.concurrency == 1
    assert [m.batches for m in ev.batching] == [True, False]
    for side in (b, c):
        measuring = [n for m, n in side.starts if "twelve" in m]
        probes = [n for m, n in side.starts if "twelve" not in m]
        assert max(measuring) == batching.WIDTH  # the measurement itself sent 4 at once
        assert probes
        assert max(probes) == 1


def test_a_set_concurrency_is_used_without_measuring() -> None:
    b, c = Server("b", serial=True), Server("c", serial=True)
    ev = _golden(b, c, golden_concurrency=2)
    assert (ev.concurrency, ev.batching) == (2, ())
    assert not any("twelve" in m for m, _ in b.starts + c.starts)  # nothing measured
    assert max(n for _, n in b.starts) == 2


def test_by_default_golden_sends_one_probe_at_a_time_without_measuring() -> None:
    # auto costs power per probe on a server that is not batch-invariant (docs/gates.md): opt-in.
    assert GateConfig.model_fields["golden_concurrency"].default == 1
    b, c = Server("b", serial=False), Server("c", serial=False)
    cfg = GateConfig.model_validate(
        {"baseline": {"url": b.base_url}, "candidate": {"url": c.base_url},
         "categories": ["canary"]}
    )  # fmt: skip
    ev = asyncio.run(collect(EndpointPair(b, c), cfg))
    assert (ev.concurrency, ev.batching) == (1, ())
    assert max(n for _, n in b.starts + c.starts) == 1
