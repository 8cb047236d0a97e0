"""The context gate against the real reference engine on loopback: clean against clean passes."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import pytest

from servegate.config.models import EndpointConfig, GateConfig, Policy
from servegate.endpoints.http import OpenAIEndpoint
from servegate.gates.context import ContextPlan, collect, evaluate
from servegate.gates.pair import EndpointPair
from servegate.verdict.model import GateResult, Status

if TYPE_CHECKING:
    from servegate.engine import RunningEngine

pytestmark = [pytest.mark.engine, pytest.mark.slow, pytest.mark.timeout(900)]

# Short on purpose: prompt processing dominates on a 2-core CPU, so one short and one medium
# needle and a medium cached prefix exercise every path in about a minute per side.
PLAN = ContextPlan(needles=((300, "start"), (900, "end")), cache_needle=(900, "end"))


@pytest.fixture(scope="module")
def clean_pair_result(engine_factory: Callable[..., RunningEngine]) -> Iterator[GateResult]:
    with engine_factory("clean") as baseline, engine_factory("clean") as candidate:
        cfg = GateConfig(
            baseline=EndpointConfig(url=baseline.base_url),
            candidate=EndpointConfig(url=candidate.base_url),
            model=baseline.model,
            request_deadline_s=180.0,
        )

        async def run() -> GateResult:
            b = OpenAIEndpoint("baseline", baseline.base_url)
            c = OpenAIEndpoint("candidate", candidate.base_url)
            try:
                ev = await collect(EndpointPair(b, c, model=baseline.model), cfg, plan=PLAN)
            finally:
                await b.aclose()
                await c.aclose()
            return evaluate(ev, Policy())

        import asyncio

        yield asyncio.run(run())


def test_clean_against_clean_passes_with_no_blocking_finding(clean_pair_result: GateResult) -> None:
    assert clean_pair_result.status is Status.PASS, clean_pair_result.findings
    assert not [f for f in clean_pair_result.findings if f.blocking]


def test_clean_engines_agree_on_every_needle(clean_pair_result: GateResult) -> None:
    m = clean_pair_result.metrics
    assert m["needles"] == 2
    assert m["needles_found_baseline"] == m["needles_found_candidate"]
    # from the server's usage of the non-streamed needle (streamed answers carry none here)
    assert isinstance(m["needle_prompt_tokens_max"], int)
    assert m["needle_prompt_tokens_max"] > 200


@pytest.mark.quarantined
def test_streamed_and_plain_text_agree_and_the_cut_stream_leaves_the_engine_serving(
    clean_pair_result: GateResult,
) -> None:
    """Quarantined 2026-12-02: in 1 of 7 runs on an idle machine (the clean-clone CI run) the
    candidate of a clean-vs-clean pair timed out on the request after the cut stream twice in a
    row ("cancel" inconclusive, the rest of the gate not sent); cause not yet known. Run with
    `bash scripts/test.sh -m quarantined`."""
    statuses = {row["probe"]: row["status"] for row in clean_pair_result.details["probes"]}
    assert statuses["stream-text"] == "pass"
    assert statuses["cancel"] == "pass"
    assert statuses["reasoning"] == "pass"
