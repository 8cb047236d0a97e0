"""The numerics gate against the real reference engine (llama.cpp, SmolLM2-135M) on loopback.

The A/A floor is measured once on the clean baseline and shared: each comparison then costs one
baseline and one candidate request per prompt. On this 2-core CPU a request takes 1-4 s.
"""

from __future__ import annotations

import asyncio
import importlib.util
from collections.abc import Iterator

import pytest

from servegate.config.models import EndpointConfig, GateConfig
from servegate.endpoints.http import OpenAIEndpoint
from servegate.gates import noise, numerics
from servegate.gates.pair import EndpointPair
from servegate.verdict.model import GateResult, Status

pytestmark = [
    pytest.mark.engine,
    pytest.mark.slow,
    pytest.mark.timeout(900),
    pytest.mark.skipif(
        importlib.util.find_spec("llama_cpp") is None, reason="reference engine not installed"
    ),
]

if importlib.util.find_spec("llama_cpp") is not None:
    from servegate.engine import RunningEngine, start_engine


@pytest.fixture(scope="module")
def baseline() -> Iterator[RunningEngine]:
    with start_engine("clean") as engine:
        yield engine


@pytest.fixture(scope="module")
def floor(baseline: RunningEngine) -> noise.NoiseFloor:
    async def measure() -> noise.NoiseFloor:
        async with OpenAIEndpoint("baseline", baseline.base_url) as ep:
            pair = EndpointPair(ep, ep, model=baseline.model)
            requests = await numerics.plan(pair, numerics.NumericsConfig(), 120.0)
            return await noise.collect(pair, requests, deadline_s=120.0)

    return asyncio.run(measure())


def gate(baseline: RunningEngine, variant: str, floor: noise.NoiseFloor) -> GateResult:
    async def run(candidate_url: str) -> GateResult:
        cfg = GateConfig(
            baseline=EndpointConfig(url=baseline.base_url),
            candidate=EndpointConfig(url=candidate_url),
            request_deadline_s=120.0,
        )
        async with (
            OpenAIEndpoint("baseline", baseline.base_url) as b,
            OpenAIEndpoint("candidate", candidate_url) as c,
        ):
            pair = EndpointPair(b, c, model=baseline.model)
            evidence = await numerics.collect(pair, cfg, noise=floor)
        return numerics.evaluate(evidence, cfg.policy)

    with start_engine(variant) as candidate:
        return asyncio.run(run(candidate.base_url))


def test_the_clean_baseline_agrees_with_itself_exactly(floor: noise.NoiseFloor) -> None:
    assert floor.measured
    assert floor.exact_match_rate == 1.0
    assert floor.mean_abs_dlogprob < 1e-3


def test_a_second_clean_engine_passes(baseline: RunningEngine, floor: noise.NoiseFloor) -> None:
    result = gate(baseline, "clean", floor)
    assert result.status is Status.PASS, result.summary
    assert result.metrics["confident_flips"] == 0


def test_the_benign_config_variant_passes(baseline: RunningEngine, floor: noise.NoiseFloor) -> None:
    result = gate(baseline, "mmap-off", floor)
    assert result.status is Status.PASS, result.summary


def test_mixed_dtype_commas_fail_as_confident_disagreements(
    baseline: RunningEngine, floor: noise.NoiseFloor
) -> None:
    result = gate(baseline, "mixed-dtype", floor)
    assert result.status is Status.FAIL
    numerics_findings = [f for f in result.findings if f.category == "numerics"]
    assert numerics_findings
    assert result.metrics["confident_flips"] == result.metrics["probes_compared"]
    assert all(f.candidate_excerpt and "," in f.candidate_excerpt for f in numerics_findings)


def test_drift_of_a_few_norm_weights_is_caught(
    baseline: RunningEngine, floor: noise.NoiseFloor
) -> None:
    result = gate(baseline, "drift", floor)
    assert result.status is Status.FAIL, result.metrics
    assert {f.category for f in result.findings if f.blocking} == {"numerics"}
