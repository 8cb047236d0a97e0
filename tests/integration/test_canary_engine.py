"""The canary against the real reference engine: requests routed by the controller to a clean
primary or a candidate engine, each answer measured with the probes' degeneration check, each
interval judged and recorded in the store.

The proxy (`servegate proxy --mode canary`) does the routing and measuring in production; here a
small driver does it with aiohttp so the judgement is tested on real answers. The clock is
advanced by the driver once both sides have answered enough requests (an "interval" is as many
requests as a measurement needs), so the test takes as long as its requests and no longer.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import time
from pathlib import Path
from typing import TYPE_CHECKING

import aiohttp
import pytest

from servegate.canary.controller import Controller
from servegate.canary.plan import parse_plan
from servegate.canary.protocol import Observation
from servegate.canary.record import open_canary_session
from servegate.config.models import CanaryPolicy, Policy
from servegate.stats.degeneration import degeneration_metrics, is_severe
from servegate.store.canary import list_decisions, load_state
from servegate.store.writer import open_engine

if TYPE_CHECKING:
    from servegate.engine import RunningEngine

# Each test sends a few dozen short requests. Measured on the shared 2-core machine
# (2026-12-01): rollback 104 s and promotion 45 s at a load average of 8-10; 115 s and 178 s at
# 14 (a mixed-dtype answer, 24 tokens of punctuation, took 5-10 s there).
pytestmark = [pytest.mark.engine, pytest.mark.slow, pytest.mark.timeout(600)]

# Prompts the clean model answers in a few tokens (the mixed-dtype model fills max_tokens with
# punctuation), so a canary takes a few dozen short requests.
PROMPTS = [
    "Reply with exactly: OK",
    "What is 2+3? Answer with a number.",
    "Name the capital of France in one word.",
]
# Small intervals for a test: 5 answers per side and metric make a measurement.
MIN = 5
POLICY = Policy(canary=CanaryPolicy(min_requests=MIN, max_extensions=3))
PLAN = parse_plan("40,60,100", "60s")
MAX_PER_INTERVAL = 40  # requests sent, one at a time, before the clock moves on regardless


class Clock:
    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


async def ask(session: aiohttp.ClientSession, url: str, prompt: str) -> dict[str, float]:
    """One chat completion; the METRICS this request measures."""
    body = {
        "model": "smollm2",
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": 24,
        "temperature": 0,
    }
    sent = time.perf_counter_ns()
    try:
        async with session.post(f"{url}/chat/completions", json=body) as response:
            payload = await response.json(content_type=None)
            status = response.status
    except (aiohttp.ClientError, TimeoutError):
        return {"error": 1.0, "timeout": 0.0}
    e2el_ms = (time.perf_counter_ns() - sent) / 1e6
    if status >= 500:
        return {"error": 1.0, "timeout": 0.0, "e2el_ms": e2el_ms}
    text = payload["choices"][0]["message"].get("content") or ""
    m = degeneration_metrics(text)
    words = text.split()
    repeats = sum(a == b for a, b in itertools.pairwise(words))
    return {
        "error": 0.0,
        "timeout": 0.0,
        "e2el_ms": e2el_ms,
        "garbage": 1.0 if is_severe(m) is not None else 0.0,
        "empty_output": 1.0 if m.empty else 0.0,
        "abnormal_char_ratio": m.abnormal_char_ratio,
        "repeated_token_ratio": repeats / len(words) if words else 0.0,
    }


async def drive(primary: RunningEngine, candidate: RunningEngine, db: Path) -> Controller:
    """Run the canary to its end (or 8 intervals), recording in the store at `db`."""
    engine = open_engine(db)
    try:
        recorder, state = open_canary_session(
            engine, "canary-test", PLAN, primary_url=primary.base_url,
            candidate_url=candidate.base_url,
        )  # fmt: skip
        clock = Clock()
        controller = Controller(PLAN, POLICY, recorder=recorder, state=state, clock=clock)
        urls = {"primary": primary.base_url, "candidate": candidate.base_url}
        rng = random.Random(7)
        timeout = aiohttp.ClientTimeout(total=60)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            for _ in range(8):
                for i in range(MAX_PER_INTERVAL):
                    side = controller.choose(rng.random())
                    metrics = await ask(session, urls[side], PROMPTS[i % len(PROMPTS)])
                    controller.observe(Observation(side, clock.now, metrics))
                    served = controller.snapshot()["requests"]
                    if min(served.get("primary", 0), served.get("candidate", 0)) >= MIN:
                        break
                clock.now += PLAN.interval_s
                decision = controller.tick()
                assert decision is not None
                await asyncio.to_thread(recorder.record, decision, controller.state())
                if controller.phase != "progressing":
                    break
        return controller
    finally:
        engine.dispose()


async def test_a_garbage_candidate_rolls_back_at_the_first_step_and_says_why(
    clean_engine: RunningEngine, mixed_dtype_engine: RunningEngine, tmp_path: Path
) -> None:
    controller = await drive(clean_engine, mixed_dtype_engine, tmp_path / "runs.db")
    assert controller.phase == "rolled_back"
    engine = open_engine(tmp_path / "runs.db")
    try:
        decisions = list_decisions(engine, "canary-test")
        state = load_state(engine, "canary-test")
    finally:
        engine.dispose()
    assert [d.action for d in decisions][-1] == "rollback"
    assert {d.step_index for d in decisions} == {0}  # never left the first step
    assert decisions[-1].evidence["reason"].startswith("critical metric high — garbage:")
    garbage = next(m for m in decisions[-1].evidence["metrics"] if m["metric"] == "garbage")
    assert garbage["classification"] == "high"
    assert garbage["candidate"] > 0.5
    assert garbage["primary"] == 0.0
    assert state is not None
    assert (state["phase"], state["weight"]) == ("rolled_back", 0.0)


async def test_a_benign_candidate_is_promoted_step_by_step_to_100(
    clean_engine: RunningEngine, benign_engine: RunningEngine, tmp_path: Path
) -> None:
    controller = await drive(clean_engine, benign_engine, tmp_path / "runs.db")
    engine = open_engine(tmp_path / "runs.db")
    try:
        decisions = list_decisions(engine, "canary-test")
    finally:
        engine.dispose()
    summary = [(d.weight, d.action, d.evidence["reason"]) for d in decisions]
    assert controller.phase == "promoted", summary
    moves = [(d.weight, d.action) for d in decisions if d.action != "hold"]
    assert moves == [(40.0, "promote"), (60.0, "complete")], summary
    assert controller.weight == 100.0
