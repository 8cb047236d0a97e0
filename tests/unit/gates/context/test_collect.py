"""collect() against in-process fakes through the Endpoint protocol: what is sent, in what order,
with which deadlines; no server, no model."""

import asyncio
import itertools
import re
from collections.abc import Mapping
from typing import Any

import pytest
from tests.unit.stub_endpoint import StubEndpoint

from servegate.config.models import EndpointConfig, GateConfig, Policy
from servegate.endpoints.errors import ErrorCategory, RequestError
from servegate.endpoints.types import Completion, Timing, ToolCall
from servegate.gates.context import ContextPlan, collect, evaluate
from servegate.gates.context.collect import LONG_STREAM_REQUEST
from servegate.gates.context.plan import Kind, full_grid
from servegate.gates.golden.probe import ProbeStatus
from servegate.gates.pair import EndpointPair
from servegate.verdict.model import Severity, Status

CFG = GateConfig(
    baseline=EndpointConfig(url="http://b/v1"),
    candidate=EndpointConfig(url="http://c/v1"),
    request_deadline_s=60.0,
    probe_deadline_s=15.0,
)
PLAN = ContextPlan(needles=full_grid((500, 1500), ("start", "end")), cache_needle=(1500, "end"))
LONG_PROMPT = LONG_STREAM_REQUEST["messages"][0]["content"]
CODE = re.compile(r"The secret code for (\w+) is (\d+)\.")


class FakeEndpoint(StubEndpoint):
    """A deterministic server: recalls every needle, calls the forced tool, serves the cache
    hit fast, and streams the long story for 5 s (so a shorter deadline cuts it)."""

    def __init__(
        self, name: str, hang_over_chars: int | None = None, first_token_s: float = 0.0
    ) -> None:
        super().__init__(name)
        self.first_token_s = first_token_s
        self.hang_over_chars = hang_over_chars
        self.log: list[tuple[str, float | None]] = []
        self._last: str | None = None

    async def completion(
        self, body: Mapping[str, Any], *, deadline_s: float | None = None
    ) -> Completion:
        self.log.append(("isolate", deadline_s))
        self._last = None
        return Completion(status=200, content="1")

    async def chat(self, body: Mapping[str, Any], *, deadline_s: float | None = None) -> Completion:
        prompt = body["messages"][0]["content"]
        kind = "stream" if body.get("stream") else "plain"
        self.log.append((f"{kind}:{prompt if len(prompt) < 80 else prompt[-40:]}", deadline_s))
        repeated, self._last = self._last == prompt, prompt
        if self.hang_over_chars is not None and len(prompt) > self.hang_over_chars:
            return Completion(status=None, error=RequestError(ErrorCategory.TIMEOUT, "no headers"))
        if "tools" in body:
            call = ToolCall(0, "call-1", "get_weather", '{"city": "Paris", "unit": "C"}')
            return Completion(status=200, tool_calls=(call,), finish_reason="tool_calls")
        if prompt == LONG_PROMPT:
            if deadline_s is not None and deadline_s < 5:
                early = deadline_s < self.first_token_s
                timing = Timing(sent_ns=1, token_chunk_ns=() if early else (2, 3, 4))
                error = RequestError(ErrorCategory.TIMEOUT, "request deadline passed mid-body")
                return Completion(
                    status=200, content="Once upon a time", error=error, timing=timing
                )
            return Completion(status=200, content="Once upon a time", finish_reason="length")
        found = CODE.search(prompt)
        answer = found.group(2) if found else "Paris"
        ttft_ns = 40_000_000 if repeated else 900_000_000
        timing = Timing(sent_ns=1, token_chunk_ns=(1 + ttft_ns,), done_ns=2 + ttft_ns)
        return Completion(status=200, content=answer, finish_reason="stop", timing=timing)


async def test_two_identical_servers_pass_every_probe() -> None:
    pair = EndpointPair(FakeEndpoint("baseline"), FakeEndpoint("candidate"), model="m")
    ev = await collect(pair, CFG, plan=PLAN)
    result = evaluate(ev, Policy())
    assert result.status is Status.PASS, result.findings
    assert [row["status"] for row in result.details["probes"]] == [str(ProbeStatus.PASS)] * 9
    assert result.metrics["needles_found_candidate"] == 4
    assert all(o.request.get("model") == "m" for o in ev.observations)


async def test_every_request_is_isolated_except_the_prefix_cache_hit() -> None:
    baseline = FakeEndpoint("baseline")
    await collect(EndpointPair(baseline, FakeEndpoint("candidate")), CFG, plan=PLAN)
    sent = [entry for entry, _ in baseline.log]
    unisolated = [
        entry for before, entry in itertools.pairwise(sent)
        if entry != "isolate" and before != "isolate"
    ]  # fmt: skip
    assert len(unisolated) == 1
    assert unisolated[0].startswith("stream:")
    assert unisolated[0].endswith("in two sentences.")  # the prefix-cache request


async def test_the_stream_is_cut_after_a_short_answers_latency_plus_the_cancel_delay() -> None:
    baseline, candidate = FakeEndpoint("baseline"), FakeEndpoint("candidate")
    await collect(EndpointPair(baseline, candidate), CFG, plan=PLAN)
    for side in (baseline, candidate):
        cuts = [dl for entry, dl in side.log if entry == f"stream:{LONG_PROMPT}"]
        assert cuts == [pytest.approx(0.9 + PLAN.cancel_after_s)]  # the fake answers in 0.9 s


async def test_a_stream_cut_before_its_first_token_is_cut_once_more_three_times_later() -> None:
    slow = FakeEndpoint("candidate", first_token_s=3.0)
    await collect(EndpointPair(FakeEndpoint("baseline"), slow), CFG, plan=PLAN)
    cuts = [dl for entry, dl in slow.log if entry == f"stream:{LONG_PROMPT}"]
    assert cuts == [pytest.approx(2.4), pytest.approx(7.2)]


async def test_a_candidate_hanging_on_long_prompts_is_not_sent_longer_ones_and_fails_fast() -> None:
    candidate = FakeEndpoint("candidate", hang_over_chars=2000)
    pair = EndpointPair(FakeEndpoint("baseline"), candidate)
    ev = await collect(pair, CFG, plan=PLAN)
    long_prompts = [dl for entry, dl in candidate.log if "number only" in entry]
    # the first needle only, at the floor deadline, and once more (one retry)
    assert long_prompts == [CFG.probe_deadline_s, CFG.probe_deadline_s]
    result = evaluate(ev, Policy())
    assert result.status is Status.FAIL
    statuses = {row["probe"]: row["status"] for row in result.details["probes"]}
    assert statuses["needle-500-start"] == "inconclusive"  # a hang, not a content verdict
    assert statuses["needle-1500-end"] == "inconclusive"
    assert statuses["prefix-cache"] == "inconclusive"
    blocking = {(f.category, f.severity) for f in result.findings if f.blocking}
    assert blocking == {("timeout", Severity.CRITICAL)}


async def test_progress_names_each_probe_and_ends_complete() -> None:
    seen: list[tuple[int, int, str]] = []
    pair = EndpointPair(FakeEndpoint("baseline"), FakeEndpoint("candidate"))
    await collect(pair, CFG, plan=PLAN, progress=lambda i, n, label: seen.append((i, n, label)))
    assert seen[0] == (0, 8, "needle-500-start")
    assert seen[-1] == (8, 8, "")
    assert [label for _, _, label in seen[3:8]] == [
        "prefix-cache", "stream-text", "stream-tools", "cancel", "reasoning",
    ]  # fmt: skip
    assert {k.value for k in Kind} >= {"cancel", "reasoning"}


class PacedEndpoint(FakeEndpoint):
    """FakeEndpoint on a slow host: a needle takes `s_per_char` × its prompt (reported in its
    timing, not slept), and one whose time would pass the request's deadline times out. Each
    answer yields to the event loop first, so the other side's request starts beside it."""

    def __init__(self, name: str, s_per_char: float, over_5000_chars: float | None = None) -> None:
        super().__init__(name)
        self.s_per_char = s_per_char
        self.over_5000_chars = over_5000_chars or s_per_char  # the pace on longer prompts

    async def chat(self, body: Mapping[str, Any], *, deadline_s: float | None = None) -> Completion:
        prompt = body["messages"][0]["content"]
        await asyncio.sleep(0)
        answer = await super().chat(body, deadline_s=deadline_s)
        if answer.error is not None or not CODE.search(prompt) or self._last_was_hit(answer):
            return answer
        pace = self.over_5000_chars if len(prompt) > 5000 else self.s_per_char
        took_ns = int(pace * len(prompt) * 1e9)
        if deadline_s is not None and took_ns > deadline_s * 1e9:
            return Completion(status=None, error=RequestError(ErrorCategory.TIMEOUT, "deadline"))
        timing = Timing(sent_ns=1, token_chunk_ns=(1 + took_ns,), done_ns=2 + took_ns)
        return Completion(status=200, content=answer.content, finish_reason="stop", timing=timing)

    @staticmethod
    def _last_was_hit(answer: Completion) -> bool:
        return answer.timing.ttft_ms is not None and answer.timing.ttft_ms < 100  # the fake's hit


# 30 s for a 500-token needle (2,193 characters): its 1,500-token needles (~6,760) take ~92 s,
# past the 60 s request deadline.
SLOW_HOST_S_PER_CHAR = 30 / 2193


def _deadlines(side: FakeEndpoint) -> tuple[list[float | None], list[float | None]]:
    """The deadlines `side` was sent its needles with, and its prefix cache's miss and hit."""
    needles = [dl for entry, dl in side.log if "number only" in entry]
    return needles, [dl for entry, dl in side.log if entry.endswith("in two sentences.")]


async def test_on_a_slow_host_the_long_needles_get_deadlines_from_the_baselines_pace() -> None:
    baseline = PacedEndpoint("baseline", SLOW_HOST_S_PER_CHAR)
    candidate = PacedEndpoint("candidate", SLOW_HOST_S_PER_CHAR)
    ev = await collect(EndpointPair(baseline, candidate), CFG, plan=PLAN)
    factor = CFG.policy.timeout_latency_factor
    paced_1500, paced_cache = (factor * SLOW_HOST_S_PER_CHAR * n for n in (6756, 6794))
    # The baseline's first needle: the request deadline (no pace yet). Then
    # timeout_latency_factor (3) × 30 s / 2,193 characters × each prompt: 90 s for the second
    # 500-token needle, ~277 s for the 1,500-token one and the prefix cache's miss and hit (one
    # deadline for the step).
    needles, cache = _deadlines(baseline)
    assert needles == [
        CFG.request_deadline_s, pytest.approx(factor * 30), pytest.approx(paced_1500),
    ]  # fmt: skip
    assert cache == [pytest.approx(paced_cache)] * 2
    # Beside the baseline, the candidate's first attempt waits as long as the baseline's pace
    # allows: only the first needle (no pace yet) is cut at the probe deadline (30 s of work)
    # and sent again with 3 × the baseline's 30 s; every later needle and the prefix cache's
    # miss and hit are answered at once.
    needles, cache = _deadlines(candidate)
    assert needles == [
        CFG.probe_deadline_s, pytest.approx(factor * 30), pytest.approx(factor * 30),
        pytest.approx(paced_1500),
    ]  # fmt: skip
    assert cache == [pytest.approx(paced_cache)] * 2
    result = evaluate(ev, Policy())
    assert result.status is Status.PASS, result.findings
    assert result.metrics["needles_found_candidate"] == 4


async def test_a_baseline_that_hangs_on_a_long_needle_still_times_out() -> None:
    # The same slow host, its longest prompts never answered: the scaled deadline ends them.
    baseline = PacedEndpoint("baseline", SLOW_HOST_S_PER_CHAR)
    baseline.hang_over_chars = 5000
    ev = await collect(EndpointPair(baseline, FakeEndpoint("candidate")), CFG, plan=PLAN)
    result = evaluate(ev, Policy())
    statuses = {row["probe"]: row["status"] for row in result.details["probes"]}
    assert statuses["needle-500-start"] == "pass"
    # A baseline's hang is not held against the candidate: not measured, said so.
    assert statuses["needle-1500-start"] == "inconclusive"
    said = [f.message for f in result.findings if f.probe == "needle-1500-start"]
    assert len(said) == 1
    assert said[0].startswith("inconclusive on the baseline: answer failed (timeout)")
    deadlines = [dl for entry, dl in baseline.log if "number only" in entry]
    assert deadlines[-1] == pytest.approx(3 * SLOW_HOST_S_PER_CHAR * 6756)  # its pace, bounded


async def test_a_candidate_hanging_past_the_baselines_pace_is_tried_twice_then_hung() -> None:
    # The pace-scaled first attempt counts as one; the retry gets 3 × the baseline's own time
    # for the step (here half what its pace on the short needles foretold), and the hang is
    # judged after the two.
    candidate = PacedEndpoint("candidate", SLOW_HOST_S_PER_CHAR)
    candidate.hang_over_chars = 5000
    baseline = PacedEndpoint("baseline", SLOW_HOST_S_PER_CHAR, SLOW_HOST_S_PER_CHAR / 2)
    ev = await collect(EndpointPair(baseline, candidate), CFG, plan=PLAN)
    long_needles = [dl for entry, dl in candidate.log if "number only" in entry][3:]
    assert long_needles == [
        pytest.approx(3 * SLOW_HOST_S_PER_CHAR * 6756),  # foretold by the baseline's pace
        pytest.approx(3 * SLOW_HOST_S_PER_CHAR / 2 * 6756),  # the baseline's own time, × 3
    ]
    statuses = {row["probe"]: row["status"] for row in evaluate(ev, Policy()).details["probes"]}
    assert statuses["needle-500-end"] == "pass"
    assert statuses["needle-1500-start"] == "inconclusive"  # a hang, not a content verdict
