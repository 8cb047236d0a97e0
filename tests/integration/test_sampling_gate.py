"""The sampling gate against the real reference engine on loopback: two clean engines pass, and
the sampling faults in front of the second one fail the checks that see them (FAULTS.md 67).

A small plan keeps the default suite cheap (about 250 first-token draws a side, 30-60 ms each
on an idle 2-core machine); the whole default plan, every fault and the repeats are in
benchmarks/sampling_gate.py (RESULTS-sampling.md).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from tests.integration.conftest import fault_in_front

from servegate.config.models import EndpointConfig, GateConfig, Policy
from servegate.endpoints.http import OpenAIEndpoint
from servegate.gates.pair import EndpointPair
from servegate.gates.sampling import SamplingPlan, collect, evaluate
from servegate.gates.sampling.plan import PROMPTS, Kind
from servegate.verdict.model import GateResult, Outcome, Status

if TYPE_CHECKING:
    from servegate.engine import RunningEngine

pytestmark = [pytest.mark.engine, pytest.mark.slow, pytest.mark.timeout(600)]

PLAN = SamplingPlan(
    prompts=PROMPTS[:2], reference_draws=64, tempered_draws=24, truncation_prompts=1,
    truncation_draws=32,
)  # fmt: skip


def judge(baseline_url: str, candidate_url: str, model: str) -> GateResult:
    cfg = GateConfig(
        baseline=EndpointConfig(url=baseline_url),
        candidate=EndpointConfig(url=candidate_url),
        model=model,
        request_deadline_s=120.0,
    )

    async def run() -> GateResult:
        b = OpenAIEndpoint("baseline", baseline_url)
        c = OpenAIEndpoint("candidate", candidate_url)
        try:
            ev = await collect(EndpointPair(b, c, model=model), cfg, plan=PLAN)
        finally:
            await b.aclose()
            await c.aclose()
        return evaluate(ev, Policy())

    return asyncio.run(run())


@pytest.fixture(scope="module")
def second_engine(engine_factory: Callable[..., RunningEngine]) -> Iterator[RunningEngine]:
    with engine_factory("clean") as engine:
        yield engine


def outcomes(result: GateResult) -> dict[str, Outcome]:
    return {c.name: c.outcome for c in result.checks}


def test_two_clean_engines_sample_alike_and_as_they_report(
    clean_engine: RunningEngine, second_engine: RunningEngine
) -> None:
    result = judge(clean_engine.base_url, second_engine.base_url, clean_engine.model)
    assert result.status is Status.PASS, (result.summary, result.findings)
    got = outcomes(result)
    for name in ("reference_fit", "temperature_0.5", "temperature_1.5", "homogeneity"):
        assert got[name] is Outcome.PASS, (name, result.not_measured)
    for kind in (Kind.TOP_P, Kind.TOP_K, Kind.MIN_P):
        assert got[str(kind)] is Outcome.PASS, (kind, result.not_measured)
    # llama.cpp reports raw logprobs, and takes top_k 0 for "no top-k".
    assert result.metrics["candidate_logprobs_mode"] == "raw"
    assert "top_k 0" in str(result.metrics["candidate_neutral_sampler"])


@pytest.mark.parametrize(
    ("fault", "failing"),
    [
        ("sampled-greedy", {"reference_fit", "temperature_1.5", "top_p", "homogeneity"}),
        # llama.cpp's own defaults (top_k 40, min_p 0.05) cut the unreported tail
        ("sampler-defaults", {"top_p", "top_k", "min_p"}),
        ("nucleus-narrowed", {"top_p"}),
    ],
)
def test_a_sampling_fault_in_front_of_a_clean_engine_fails_the_checks_that_see_it(
    fault: str,
    failing: set[str],
    clean_engine: RunningEngine,
    second_engine: RunningEngine,
    tmp_path: Path,
) -> None:
    with fault_in_front([fault], second_engine.base_url, tmp_path / "proxy.log") as url:
        result = judge(clean_engine.base_url, url, clean_engine.model)
    assert result.status is Status.FAIL
    failed = {name for name, outcome in outcomes(result).items() if outcome is Outcome.FAIL}
    assert failing <= failed, outcomes(result)
    assert all(f.side == "candidate" for f in result.findings if f.blocking)
