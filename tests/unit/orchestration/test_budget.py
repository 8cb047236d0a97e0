"""`--budget`: each gate is planned from the time left and the speed the gates so far measured,
and says what it was given and which power that gave up."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from servegate.config.models import EndpointConfig, GateConfig
from servegate.endpoints.scripted import ScriptedServer, reply_json
from servegate.gates.pair import EndpointPair
from servegate.orchestration.budget import COST, MIN_SHARE, PRIOR_S, SCORING_S, Budget
from servegate.orchestration.runner import GateProgress, GateRunner, run
from servegate.verdict.model import GateResult, GateTime, PartTime, Status

ORDER = ("startup", "numerics", "embeddings", "golden", "sampling", "context", "performance")
# Each gate's seconds in the reference run the model was taken from (the numerics pair: its
# probes and other work, then its prompt scoring).
REFERENCE = {"startup": 9.0, "numerics": (10.0, 45.0), "embeddings": 0.2, "golden": 82.0,
             "sampling": 108.0, "context": 59.0, "performance": 97.0}  # fmt: skip


def _cfg(**extra: Any) -> GateConfig:
    return GateConfig(
        baseline=EndpointConfig(url="http://127.0.0.1:9/v1"),
        candidate=EndpointConfig(url="http://127.0.0.1:9/v1"),
        **extra,
    )


def _simulate(total_s: float, slower: float) -> tuple[float, dict[str, GateConfig]]:
    """A run of engines `slower` × the reference's speed (prompt scoring too) under a budget:
    each gate takes its reference seconds × `slower` at the settings planned for it."""
    budget, spent, given = Budget(total_s), 0.0, {}
    for i, name in enumerate(ORDER):
        planned = budget.plan(name, ORDER[i:], _cfg())
        cfg, parts = planned.cfg, ()
        given[name] = cfg
        if name == "numerics":
            probes, scoring = REFERENCE["numerics"]  # type: ignore[misc]
            scored = min(scoring * slower, cfg.perplexity_budget_s)
            seconds = probes * slower * cfg.numerics_prompts / 12 + scored
            parts = (PartTime(part="prompt scoring (perplexity)", seconds=scored),)
        elif name == "sampling":  # its production answers, seeds and penalty answers run whole
            seconds = (59 + 49 * cfg.sampling_share) * slower
        elif name == "performance":  # its load blocks, 81 s, scale with requests a block
            seconds = (16 + 81 * cfg.performance.requests_per_block / 8) * slower
        else:
            seconds = REFERENCE[name] * slower  # type: ignore[operator]
        spent += seconds
        time = GateTime(seconds=seconds, parts=parts, share=planned.share, plan=planned.text)
        budget.ran(name, GateResult(name=name, status=Status.PASS, summary="", time=time))
    return spent, given


def test_the_model_is_the_reference_run_it_names() -> None:
    assert sum(a + b for a, b in COST.values()) == pytest.approx(410, abs=1)
    assert COST["numerics"][1] > SCORING_S


def test_a_budget_the_whole_run_fits_changes_nothing() -> None:
    spent, given = _simulate(600, slower=1.0)
    assert spent == pytest.approx(411, abs=1)
    assert all(cfg == _cfg() for name, cfg in given.items() if name != "numerics")
    assert given["numerics"].numerics_prompts == 12
    assert given["numerics"].perplexity_budget_s >= 45  # its model seconds, at least


def test_a_tight_budget_scales_the_scalable_gates_and_keeps_the_rest_whole() -> None:
    spent, given = _simulate(300, slower=1.0)
    assert spent <= 300 * 1.01  # a model: the probes round up
    sampling = given["sampling"].sampling_share
    assert MIN_SHARE < sampling < 0.6
    assert given["numerics"].numerics_prompts < 12
    assert given["numerics"].perplexity_budget_s < 45
    performance = given["performance"].performance
    # At the fewest requests a block no look after the first fits: one look, its whole alpha.
    assert (performance.requests_per_block, performance.max_blocks) == (5, performance.blocks)
    assert performance.looks_within_s is None
    assert given["golden"] == given["context"] == given["startup"] == _cfg()


def test_slower_engines_are_measured_and_given_less_of_the_scalable_work() -> None:
    _, fast = _simulate(480, slower=1.0)
    slow_spent, slow = _simulate(480, slower=1.3)  # 533 s at full power
    assert fast["sampling"].sampling_share == 1.0
    assert slow["sampling"].sampling_share < 1.0
    assert slow_spent <= 480 * 1.01  # a model: within 1 % when every gate is slower alike


def test_the_performance_gate_keeps_the_looks_that_fit_and_scaled_keeps_time_for_one() -> None:
    """Stock llama-cpp-python, `--budget 8m`, 2026-12-07: the performance gate's blocks were
    scaled to 7 requests and a scaled gate ran no look after its first, so TTFT and E2EL were
    left open (the run inconclusive). Now the looks that fit are planned, and a gate whose
    blocks are scaled anyway keeps time for one look (at 1× the model's speed: 97 s for the
    first look, 27 s for each of up to 3 more at 8 requests a block)."""
    cfg = _cfg()

    def planned(total_s: float) -> tuple[int, int, float | None]:
        perf = Budget(total_s).plan("performance", ("performance",), cfg).cfg.performance
        return perf.requests_per_block, perf.max_blocks, perf.looks_within_s

    assert planned(97 + 3 * 27 + 1) == (8, 12, None)  # every look fits: whole
    assert planned(97 + 40)[:2] == (8, 8)  # one look fits in 40 s, timed by the gate
    assert planned(97 + 40)[2] == pytest.approx(40)
    assert planned(97 + 23) == (8, 6, None)  # not one: the first look with its whole alpha
    # 90 s would hold 7 requests a block and no look; the plan gives 5 and one look.
    assert planned(90)[:2] == (5, 8)
    assert planned(90)[2] == pytest.approx(90 - (16 + 81 * 5 / 8))


def test_the_baseline_s_own_noise_is_spent_but_does_not_count_as_slowness() -> None:
    """flash-attn, 2026-12-07: numerics sent the baseline's noise floor (30.6 s, when-needed),
    and the speed read from it alone (2.5×) cut the sampling plan to its smallest."""
    budget, shares = Budget(300), {}
    for name, seconds, parts in (
        ("startup", 5.0, ()),
        ("numerics", 67.5, (PartTime(part="noise floor (the baseline's own paths)", seconds=30.6),
                            PartTime(part="prompt scoring (perplexity)", seconds=25.9))),
    ):  # fmt: skip
        planned = budget.plan(name, ORDER[ORDER.index(name) :], _cfg())
        shares[name] = planned.share
        time = GateTime(seconds=seconds, parts=parts, share=planned.share)
        budget.ran(name, GateResult(name=name, status=Status.PASS, summary="", time=time))
    modelled = 9.0 + 1.0 + shares["numerics"] * 9.0  # the probes' 9 s scale
    assert budget.speed == pytest.approx((5.0 + 11.0 + PRIOR_S) / (modelled + PRIOR_S))
    assert budget.spent_s == 72.5


def test_the_smallest_plan_on_the_model_s_engines_is_about_296_s() -> None:
    """Golden, context, startup, sampling's production and penalty answers and the performance
    gate's 5-request blocks: what no budget goes below on the host the model was measured on
    (273 s while the penalty answers were scaled, before 2026-12-08)."""
    spent, given = _simulate(200, slower=1.0)
    assert spent == pytest.approx(296, abs=2)
    assert given["sampling"].sampling_share == MIN_SHARE
    # 6 blocks × 5 ≥ the 20 answers a latency check needs, and 5 prompts answered alone are
    # the fewest with which early_divergence's exact test can reach p < 0.05.
    assert given["performance"].performance.requests_per_block == 5


def test_a_fast_startup_alone_does_not_set_the_plan() -> None:
    """5m-flash-attn, 2026-12-07: startup at 0.57× the model's speed gave prompt scoring 90 s;
    the gates after it ran at 0.8-0.9×, and the run ended 7 % over its budget."""
    budget = Budget(300)
    planned = budget.plan("startup", ORDER, _cfg())
    time = GateTime(seconds=5.2, share=planned.share)
    budget.ran("startup", GateResult(name="startup", status=Status.PASS, summary="", time=time))
    assert 0.8 < budget.speed < 0.9  # (5.2 + 15) / (9 + 15)
    numerics = budget.plan("numerics", ORDER[1:], _cfg())
    assert numerics.cfg.perplexity_budget_s < 45


def test_prompt_scoring_gets_more_than_its_model_seconds_only_if_slower_gates_would_fit() -> None:
    """Stock llama-cpp-python, 8 minutes, 2026-12-07: startup at 0.94× gave prompt scoring
    138 s; the gates after it ran at 1.5-2.8× and the run ended 7 % over its budget."""
    budget = Budget(480)
    planned = budget.plan("startup", ORDER, _cfg())
    time = GateTime(seconds=8.5, share=planned.share)
    budget.ran("startup", GateResult(name="startup", status=Status.PASS, summary="", time=time))
    numerics = budget.plan("numerics", ORDER[1:], _cfg())
    assert numerics.cfg.perplexity_budget_s == pytest.approx(budget.speed * SCORING_S)
    assert numerics.cfg.numerics_prompts == 12
    roomy = Budget(1200).plan("numerics", ORDER[1:], _cfg())
    assert roomy.cfg.perplexity_budget_s > 400  # 1200 s holds the rest even at twice the time


def test_a_budget_too_small_for_the_unscalable_gates_runs_the_smallest_plan_and_says_so() -> None:
    budget = Budget(60)
    planned = budget.plan("sampling", ORDER[4:], _cfg())
    assert planned.cfg.sampling_share == MIN_SHARE
    assert "the smallest plan runs" in planned.text
    assert "the smallest temperature error a check would detect grows" in planned.text


def test_a_setting_already_below_the_plan_is_kept() -> None:
    planned = Budget(10_000).plan("numerics", ORDER[1:], _cfg(numerics_prompts=4))
    assert planned.cfg.numerics_prompts == 4
    planned = Budget(300).plan("sampling", ORDER[4:], _cfg(sampling_share=0.1))
    assert planned.cfg.sampling_share == 0.1


# Through the runner: gates that record the settings they were given.


@pytest.fixture
async def urls() -> AsyncIterator[tuple[str, str]]:
    def server() -> ScriptedServer:
        return ScriptedServer().route(
            "/v1/models", reply_json({"object": "list", "data": [{"id": "m"}]})
        )

    async with server() as baseline, server() as candidate:
        yield baseline.url, candidate.url


def _recording(seen: dict[str, GateConfig]) -> dict[str, GateRunner]:
    def gate(name: str) -> GateRunner:
        async def run_gate(pair: EndpointPair, cfg: GateConfig, _: GateProgress) -> GateResult:
            seen[name] = cfg
            return GateResult(name=name, status=Status.PASS, summary=name)

        return run_gate

    return {name: gate(name) for name in ORDER}


async def test_the_runner_plans_each_gate_and_its_report_says_what_it_gave_up(
    urls: tuple[str, str],
) -> None:
    seen: dict[str, GateConfig] = {}
    cfg = GateConfig(baseline=EndpointConfig(url=urls[0]), candidate=EndpointConfig(url=urls[1]),
                     budget_s=1.0)  # fmt: skip
    report = await run(cfg, gates=_recording(seen))
    assert seen["sampling"].sampling_share == MIN_SHARE
    assert seen["numerics"].numerics_prompts == 3
    assert seen["performance"].performance.max_blocks == seen["performance"].performance.blocks
    plans = {g.name: g.time.plan for g in report.gates if g.time is not None}
    assert set(plans) == set(ORDER)
    assert "25% of the sampling plan's first-token draws" in plans["sampling"]
    assert "3 of 12 probes" in plans["numerics"]
    assert "no looks after the first" in plans["performance"]
    assert "run whole" in plans["golden"]


async def test_without_a_budget_every_gate_gets_the_run_s_settings(urls: tuple[str, str]) -> None:
    seen: dict[str, GateConfig] = {}
    cfg = GateConfig(baseline=EndpointConfig(url=urls[0]), candidate=EndpointConfig(url=urls[1]))
    report = await run(cfg, gates=_recording(seen))
    assert all(given == cfg for given in seen.values())
    assert all(g.time is not None and not g.time.plan for g in report.gates)
