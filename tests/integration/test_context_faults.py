"""Faults outside the weights fail the context gate with their category (clean baseline)."""

from __future__ import annotations

import asyncio

import pytest

from servegate.config.models import EndpointConfig, GateConfig, Policy
from servegate.endpoints.http import OpenAIEndpoint
from servegate.engine import RunningEngine
from servegate.gates.context import ContextPlan, collect, evaluate
from servegate.gates.pair import EndpointPair
from servegate.verdict.model import GateResult, Status

pytestmark = [pytest.mark.engine, pytest.mark.slow, pytest.mark.timeout(600)]

# One short needle keeps prompt processing cheap; the probes under test are stream parity and
# reasoning, which do not depend on context length.
PLAN = ContextPlan(needles=((500, "end"),), cache_needle=(500, "end"))


def context_gate(baseline: RunningEngine, candidate: RunningEngine) -> GateResult:
    cfg = GateConfig(
        baseline=EndpointConfig(url=baseline.base_url),
        candidate=EndpointConfig(url=candidate.base_url),
        model=baseline.model,
        request_deadline_s=180.0,
    )

    async def run() -> GateResult:
        async with (
            OpenAIEndpoint("baseline", baseline.base_url) as b,
            OpenAIEndpoint("candidate", candidate.base_url) as c,
        ):
            ev = await collect(EndpointPair(b, c, model=baseline.model), cfg, plan=PLAN)
        return evaluate(ev, Policy())

    return asyncio.run(run())


def blocking_categories(result: GateResult) -> set[str]:
    return {f.category for f in result.findings if f.blocking}


def test_streamed_tool_arguments_losing_a_fragment_fail_stream_parity(
    clean_engine: RunningEngine, stream_tool_args_engine: RunningEngine
) -> None:
    result = context_gate(clean_engine, stream_tool_args_engine)
    assert result.status is Status.FAIL
    assert blocking_categories(result) & {"stream_parity", "invalid_tool_args"}
    statuses = {row["probe"]: row["status"] for row in result.details["probes"]}
    assert statuses["stream-tools"] == "regressed"


def test_reasoning_leaking_into_content_fails_with_reasoning_leak(
    clean_engine: RunningEngine, reasoning_leak_engine: RunningEngine
) -> None:
    result = context_gate(clean_engine, reasoning_leak_engine)
    assert result.status is Status.FAIL
    assert "reasoning_leak" in blocking_categories(result)
