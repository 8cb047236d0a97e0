"""The sampling gate sends each side as many of its longer answers at once as it serves: 16 to a
side that batches, 4 to one that serves one request at a time (`sampling_answer_concurrency:
auto`), or the number the configuration names, unmeasured. The first-token draws go 4 at a time
on every side: a batching server's distribution moves with the batch, and a cell's draws are
judged against one report.

The servers are test_batching's fakes through the Endpoint interface: no real server can be
made to batch or not on demand here (the reference engine never batches, vLLM always does; the
real vLLM measurement is in benchmarks/RESULTS-time.md)."""

import asyncio
from dataclasses import replace

import pytest
from tests.unit.gates.test_batching import Server

from servegate.config.models import EndpointConfig, GateConfig
from servegate.config.policy import Policy
from servegate.gates.pair import EndpointPair
from servegate.gates.sampling.collect import collect
from servegate.gates.sampling.judgement import evaluate
from servegate.gates.sampling.penalties import PROMPT as PENALTY_PROMPT
from servegate.gates.sampling.plan import PROMPTS, SamplingPlan
from servegate.gates.sampling.production import PROBES
from servegate.gates.sampling.sequences import SEED_PROMPT
from servegate.verdict.model import GateResult

# One temperature-1 cell of 24 draws, then the production-settings probes 8 times each (the
# open-ended one 16 times): 40 answers, each probe's free to go at once.
PLAN = SamplingPlan(
    prompts=PROMPTS[:1], reference_draws=24, temperatures=(), truncations=(), seeds=(),
    choices_requests=0, penalty_draws=0, bias_draws=0, production_repeats=8,
)  # fmt: skip
PRODUCTION_PROMPTS = {prompt for _, prompt, _ in PROBES}


def _collect(baseline: Server, candidate: Server, at_once: int | str = "auto") -> GateResult:
    cfg = GateConfig(
        baseline=EndpointConfig(url="http://b/v1"),
        candidate=EndpointConfig(url="http://c/v1"),
        sampling_answer_concurrency=at_once,
        request_deadline_s=30,
    )
    ev = asyncio.run(collect(EndpointPair(baseline, candidate), cfg, plan=PLAN))
    assert len(ev.cells[0].baseline) == len(ev.cells[0].candidate) == 24
    return evaluate(ev, Policy())


def _most_at_once(server: Server, prompts: set[str]) -> int:
    """The most requests in flight when one of `prompts` came in (itself included)."""
    return max(n for messages, n in server.starts if any(p in messages for p in prompts))


@pytest.mark.timed  # the batching measurement is wall-clock seconds: run alone (scripts/test.sh)
def test_auto_sends_a_batching_side_its_answers_sixteen_at_a_time_and_a_serial_one_four() -> None:
    baseline, candidate = Server("baseline", serial=False), Server("candidate", serial=True)
    metrics = _collect(baseline, candidate).metrics
    draw = {PROMPTS[0][1]}
    assert _most_at_once(baseline, draw) == _most_at_once(candidate, draw) == 4
    # The batching side gets a probe's production answers 16 at a time (the open-ended probe's
    # 16 at once), the serial side 4 at a time, as before.
    assert _most_at_once(baseline, PRODUCTION_PROMPTS) == 16
    assert _most_at_once(candidate, PRODUCTION_PROMPTS) == 4
    # ... and on both one probe's answers after another's, never beside another's: the first
    # json answer starts alone.
    json_prompt = PROBES[1][1]
    first_json = [next(n for m, n in s.starts if json_prompt in m) for s in (baseline, candidate)]
    assert first_json == [1, 1]
    # The report says how many went at once and why, and counts the measuring requests (one
    # alone and four at once a side) with every other request the side was sent.
    assert (metrics["baseline_answers_at_once"], metrics["candidate_answers_at_once"]) == (16, 4)
    assert metrics["draws_at_once"] == 4
    assert str(metrics["baseline_batching"]).startswith("batches: 4 requests at once took")
    assert str(metrics["candidate_batching"]).startswith("serves one at a time: 4 requests")
    assert metrics["requests_candidate"] == len(candidate.starts) == 1 + 5 + 24 + 40


def test_a_number_is_sent_as_asked_on_both_sides_without_measuring() -> None:
    baseline, candidate = Server("baseline", serial=False), Server("candidate", serial=False)
    metrics = _collect(baseline, candidate, at_once=2).metrics
    for server in (baseline, candidate):
        assert _most_at_once(server, PRODUCTION_PROMPTS) == 2
        assert not any("Count from one to twelve" in m for m, _ in server.starts)
    assert (metrics["baseline_answers_at_once"], metrics["candidate_answers_at_once"]) == (2, 2)
    assert "baseline_batching" not in metrics


def test_the_longer_answers_keep_their_order_around_the_seeded_requests() -> None:
    """Production answers before the seeds, penalties after them, as the plan lists them and as
    before, each request's repeats together. llama-cpp-python 0.3 seeds each request from one
    chain that a seeded request resets (llama.py, `_create_completion`), so production answers
    moved after the seeds would repeat pair by pair on two identical servers."""
    plan = replace(PLAN, reference_draws=1, seeds=(11,), penalty_draws=2, production_repeats=1)
    baseline, candidate = Server("baseline", serial=False), Server("candidate", serial=False)
    cfg = GateConfig(
        baseline=EndpointConfig(url="http://b/v1"),
        candidate=EndpointConfig(url="http://c/v1"),
        sampling_answer_concurrency=16,
        request_deadline_s=30,
    )
    asyncio.run(collect(EndpointPair(baseline, candidate), cfg, plan=plan))
    for server in (baseline, candidate):
        order = [m for m, _ in server.starts]
        production = [i for i, m in enumerate(order) if any(p in m for p in PRODUCTION_PROMPTS)]
        seeded = [i for i, m in enumerate(order) if SEED_PROMPT in m]
        penalised = [i for i, m in enumerate(order) if PENALTY_PROMPT in m]
        assert (len(production), len(seeded), len(penalised)) == (5, 3, 8)
        assert max(production) < min(seeded)
        assert max(seeded) < min(penalised)
        # each request's repeats at once, never beside another request's (16 slots, 2 a request)
        assert max(server.starts[i][1] for i in production) == 2
        assert max(server.starts[i][1] for i in penalised) == 2
