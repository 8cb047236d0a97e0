"""The canary controller on plain data with a fake clock: routing, promotion step by step,
automatic rollback, holding on too little traffic, and a restart from the saved state."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Mapping
from typing import Any

import pytest

from servegate.canary.controller import MAX_SAMPLES, Controller, Decision
from servegate.canary.plan import CanaryPlan, CanaryPlanError, parse_interval, parse_plan
from servegate.canary.protocol import RequestObservation, Side
from servegate.config.models import CanaryPolicy, Policy

POLICY = Policy(canary=CanaryPolicy(min_requests=20, max_extensions=2))
PLAN = parse_plan("10,50,100", "60s")


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


class Memory:
    """A recorder that keeps what it is given (the store's is tested in tests/unit/store)."""

    def __init__(self) -> None:
        self.kept: list[tuple[Decision, Mapping[str, Any]]] = []

    def record(self, decision: Decision, state: Mapping[str, Any]) -> None:
        self.kept.append((decision, dict(state)))


def answer(
    side: Side, at: float, rng: random.Random, *, garbage: bool = False
) -> RequestObservation:
    return RequestObservation(
        side,
        at,
        {
            "error": 0.0,
            "timeout": 0.0,
            "garbage": 1.0 if garbage else 0.0,
            "e2el_ms": 200 * rng.uniform(0.9, 1.1),
            "empty_output": 0.0,
        },
    )


def serve(
    controller: Controller, clock: Clock, n: int, *, bad: bool = False, seed: int = 0
) -> None:
    """n requests routed by the controller, each answered well (or, by the candidate, badly)."""
    rng = random.Random(seed)
    for _ in range(n):
        side = controller.choose(rng.random())
        controller.observe(answer(side, clock.now, rng, garbage=bad and side == "candidate"))


@pytest.mark.parametrize(
    ("steps", "interval", "message"),
    [
        ("1,10,x", "60s", "--steps '1,10,x': not a comma-separated list"),
        ("10,5,100", "60s", "--steps 10,5,100: steps must strictly increase"),
        ("1,10,50", "60s", "--steps 1,10,50: the last step must be 100"),
        ("0,50,100", "60s", r"--steps 0,50,100: each step must be in \(0, 100\]"),
        ("100", "60s", "--steps 100: give at least one step below 100"),
        ("1,100", "soon", "--interval 'soon': not a duration"),
        ("1,100", "0s", "--interval '0s': must be longer than 0"),
    ],
    ids=["not-a-number", "decreasing", "not-ending-at-100", "zero", "only-100", "word", "zero-s"],
)
def test_a_bad_plan_is_one_line_naming_the_option(steps: str, interval: str, message: str) -> None:
    with pytest.raises(CanaryPlanError, match=message) as caught:
        parse_plan(steps, interval)
    assert "\n" not in str(caught.value)
    assert caught.value.exit_code == 2


@pytest.mark.parametrize(
    ("text", "seconds"), [("60s", 60), ("2m", 120), ("500ms", 0.5), ("1.5", 1.5), ("1h", 3600)]
)
def test_intervals_read_with_their_unit(text: str, seconds: float) -> None:
    assert parse_interval(text) == seconds


def test_the_weight_routes_that_share_and_a_secondary_gets_as_much() -> None:
    rng = random.Random(1)
    draws = [rng.random() for _ in range(20_000)]
    alone = Controller(PLAN, POLICY)
    with_secondary = Controller(PLAN, POLICY, secondary=True)
    shares = {
        name: {
            s: sum(c.choose(u) == s for u in draws) / len(draws) for s in ("candidate", "secondary")
        }
        for name, c in (("alone", alone), ("secondary", with_secondary))
    }
    assert shares["alone"]["candidate"] == pytest.approx(0.10, abs=0.01)
    assert shares["alone"]["secondary"] == 0
    assert shares["secondary"]["candidate"] == pytest.approx(0.10, abs=0.01)
    assert shares["secondary"]["secondary"] == pytest.approx(0.10, abs=0.01)
    half = Controller(parse_plan("50,100", "1s"), POLICY, secondary=True)
    assert half.secondary_share == 0.25  # the primary keeps as many as the secondary


def test_a_healthy_candidate_is_promoted_step_by_step_to_100() -> None:
    clock, memory = Clock(), Memory()
    controller = Controller(PLAN, POLICY, recorder=memory, clock=clock)
    actions = []
    for step in range(2):
        serve(controller, clock, 600, seed=step)
        assert controller.tick() is None  # not due yet
        clock.now += 60
        decision = controller.tick()
        assert decision is not None
        actions.append((decision.weight, decision.action, controller.weight))
    assert actions == [(10, "promote", 50), (50, "complete", 100)]
    assert controller.phase == "promoted"
    assert controller.choose(0.999) == "candidate"
    assert controller.tick() is None  # finished: nothing more to judge


def test_a_garbage_candidate_rolls_back_at_the_first_step_for_good() -> None:
    clock = Clock()
    controller = Controller(PLAN, POLICY, clock=clock)
    serve(controller, clock, 600, bad=True)
    clock.now += 60
    decision = controller.tick()
    assert decision is not None
    assert (decision.action, decision.weight, controller.weight) == ("rollback", 10, 0)
    assert decision.reason.startswith("degenerate-answer rate, candidate − primary: +100.0 pts")
    garbage = decision.evidence["values"]["garbage"]
    assert (garbage["candidate"], garbage["primary"]) == (1.0, 0.0)
    [row] = [c for c in decision.evidence["checks"] if c["name"] == "garbage"]
    assert row["outcome"] == "fail"
    assert controller.phase == "rolled_back"
    assert {controller.choose(u / 10) for u in range(10)} == {"primary"}
    serve(controller, clock, 100)  # later answers judge nothing
    clock.now += 600
    assert controller.tick() is None


def test_too_few_requests_hold_the_step_then_roll_back_after_the_extensions() -> None:
    clock = Clock()
    controller = Controller(PLAN, POLICY, clock=clock)  # max_extensions 2
    actions = []
    for _ in range(3):
        serve(controller, clock, 50)  # ~5 for the candidate per interval
        clock.now += 60
        decision = controller.tick()
        assert decision is not None
        actions.append(decision.action)
    assert actions == ["hold", "hold", "rollback"]
    assert controller.last_decision is not None
    assert "after 2 extension(s) of step 10 %" in controller.last_decision.reason
    assert "too few answers" in controller.last_decision.reason


def test_a_held_interval_keeps_its_answers_and_promotes_once_there_are_enough() -> None:
    clock = Clock()
    controller = Controller(PLAN, POLICY, clock=clock)
    serve(controller, clock, 120, seed=1)  # ~12 candidate answers: too few
    clock.now += 60
    assert (d := controller.tick()) is not None
    assert d.action == "hold"
    serve(controller, clock, 120, seed=2)  # ~12 more: enough together
    clock.now += 60
    assert (d := controller.tick()) is not None
    assert d.action == "promote", d.reason
    assert d.evidence["requests"]["candidate"] >= 20


def test_answers_from_before_the_interval_are_not_judged() -> None:
    clock = Clock()
    controller = Controller(PLAN, POLICY, clock=clock)
    rng = random.Random(0)
    controller.observe(answer("candidate", clock.now - 1, rng))
    assert controller.snapshot()["requests"] == {}


def test_a_restart_resumes_at_the_saved_step_and_a_rollback_stays_final() -> None:
    clock, memory = Clock(), Memory()
    first = Controller(PLAN, POLICY, recorder=memory, clock=clock)
    serve(first, clock, 600)
    clock.now += 60
    decision = first.tick()
    assert decision is not None
    memory.record(decision, first.state())
    saved = memory.kept[-1][1]
    again = Controller(PLAN, POLICY, clock=clock, state=saved)
    assert (again.step_index, again.weight, again.phase) == (1, 50, "progressing")
    assert again.last_decision == first.last_decision
    with pytest.raises(CanaryPlanError, match="the saved canary ran with steps 10,50,100"):
        Controller(parse_plan("1,100", "60s"), POLICY, state=saved)
    rolled = Controller(
        PLAN, POLICY, clock=clock, state=saved | {"phase": "rolled_back", "weight": 0.0}
    )
    assert rolled.choose(0.0) == "primary"


async def test_run_judges_on_its_own_and_records_each_decision() -> None:
    memory = Memory()
    controller = Controller(CanaryPlan((50.0, 100.0), 0.2), POLICY, recorder=memory)
    rng = random.Random(3)
    stop = asyncio.Event()
    task = asyncio.create_task(controller.run(stop))
    while controller.phase == "progressing":
        side = controller.choose(rng.random())
        controller.observe(answer(side, time.time(), rng))
        await asyncio.sleep(0.001)
    await asyncio.wait_for(task, timeout=5)
    assert [d.action for d, _ in memory.kept][-1] == "complete"
    assert memory.kept[-1][1]["phase"] == "promoted"


async def test_run_returns_when_stopped() -> None:
    controller = Controller(PLAN, POLICY)
    stop = asyncio.Event()
    task = asyncio.create_task(controller.run(stop))
    stop.set()
    await asyncio.wait_for(task, timeout=2)
    assert controller.phase == "progressing"


def test_a_busy_interval_is_judged_on_a_uniform_sample_of_bounded_size() -> None:
    clock = Clock()
    controller = Controller(parse_plan("50,100", "60s"), POLICY, clock=clock)
    rng = random.Random(5)
    n = MAX_SAMPLES + 5_000
    for i in range(2 * n):
        # Later answers are slower: a sample of the first answers only would miss them.
        side = "primary" if i % 2 else "candidate"
        metrics = {"error": 0.0, "garbage": 0.0, "e2el_ms": 100.0 + (i > n) * 100 * rng.random()}
        controller.observe(RequestObservation(side, clock.now, metrics))
    clock.now += 60
    decision = controller.tick()
    assert decision is not None
    assert decision.evidence["requests"] == {"primary": n, "candidate": n}
    assert decision.evidence["sampled"] is True
    e2el = decision.evidence["values"]["e2el_ms"]
    assert (e2el["n_primary"], e2el["n_candidate"]) == (MAX_SAMPLES, MAX_SAMPLES)
    assert e2el["primary"] > 150  # block P95s of all answers, not of the first MAX_SAMPLES (100)


async def test_run_holds_a_quiet_step_and_keeps_its_answers_across_the_hold() -> None:
    recorded, loop = asyncio.Event(), asyncio.get_running_loop()

    class Signalling(Memory):
        def record(self, decision: Decision, state: Mapping[str, Any]) -> None:
            super().record(decision, state)
            loop.call_soon_threadsafe(recorded.set)  # record() runs in a worker thread

    memory = Signalling()
    controller = Controller(CanaryPlan((50.0, 100.0), 0.3), POLICY, recorder=memory)
    rng = random.Random(4)
    stop = asyncio.Event()
    task = asyncio.create_task(controller.run(stop))
    for _ in range(24):  # ~12 a side: too few for one interval, enough for two together
        side = controller.choose(rng.random())
        controller.observe(answer(side, time.time(), rng))
    await asyncio.wait_for(recorded.wait(), timeout=5)
    for _ in range(24):
        side = controller.choose(rng.random())
        controller.observe(answer(side, time.time(), rng))
    await asyncio.wait_for(task, timeout=5)
    actions = [d.action for d, _ in memory.kept]
    assert actions == ["hold", "complete"], [d.reason for d, _ in memory.kept]
    assert sum(memory.kept[-1][0].evidence["requests"].values()) == 48


async def test_a_finished_canary_is_final_across_a_restart_and_run_returns_at_once() -> None:
    clock, memory = Clock(), Memory()
    first = Controller(PLAN, POLICY, recorder=memory, clock=clock)
    serve(first, clock, 600)
    clock.now += 60
    assert first.tick() is not None  # promoted to 50 %
    decision = await first.finish("Flagger is done", {"flagger": {"phase": "Succeeded"}})
    assert (decision.action, decision.step_index, decision.weight) == ("finalise", 1, 50.0)
    saved = memory.kept[-1][1]
    assert (saved["phase"], saved["weight"]) == ("finalised", 0.0)
    again = Controller(PLAN, POLICY, clock=clock, state=saved)
    assert (again.phase, again.weight) == ("finalised", 0.0)
    assert again.choose(0.0) == "primary"
    assert again.last_decision == decision
    await asyncio.wait_for(again.run(asyncio.Event()), timeout=2)  # nothing left to judge
