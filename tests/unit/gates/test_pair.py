"""Serving both sides at once keeps the judgement of serving them in turn: the candidate's
deadline is the one scaled to the baseline's answer, whenever that answer comes in."""

import asyncio
from collections.abc import Mapping
from typing import Any

import pytest
from tests.unit.stub_endpoint import StubEndpoint

from servegate.endpoints.errors import ErrorCategory, RequestError
from servegate.endpoints.types import Completion, Timing
from servegate.gates.pair import EndpointPair, timed_out


class SleepyEndpoint(StubEndpoint):
    """Answers after `latency_s`, or times out at its deadline; logs every call in order."""

    def __init__(self, name: str, latency_s: float, log: list[str], url: str = "") -> None:
        super().__init__(name, url)
        self.latency_s, self.log = latency_s, log
        self.deadlines: list[float | None] = []

    async def completion(
        self, body: Mapping[str, Any], *, deadline_s: float | None = None
    ) -> Completion:
        return Completion(status=200, content="0")  # the isolation request

    async def chat(self, body: Mapping[str, Any], *, deadline_s: float | None = None) -> Completion:
        self.deadlines.append(deadline_s)
        self.log.append(f"{self._name} start")
        loop = asyncio.get_running_loop()
        sent = int(loop.time() * 1e9)
        if deadline_s is not None and self.latency_s > deadline_s:
            await asyncio.sleep(deadline_s)
            self.log.append(f"{self._name} timeout")
            error = RequestError(ErrorCategory.TIMEOUT, f"no answer in {deadline_s} s")
            return Completion(status=None, error=error, timing=Timing(sent_ns=sent))
        await asyncio.sleep(self.latency_s)
        self.log.append(f"{self._name} done")
        done = int(loop.time() * 1e9)
        timing = Timing(sent_ns=sent, token_chunk_ns=(done,), token_chunk_tokens=(1,), done_ns=done)
        return Completion(status=200, content="OK", finish_reason="stop", timing=timing)


REQUEST = {"messages": [{"role": "user", "content": "Reply with exactly: OK"}]}


def _both(pair: EndpointPair, deadline_s: float) -> tuple[Completion, Completion]:
    return asyncio.run(pair.both("chat", REQUEST, gate="g", probe="p", deadline_s=deadline_s))


@pytest.mark.parametrize("at_once", [True, False], ids=["at-once", "in-turn"])
def test_a_baseline_beyond_the_deadline_scales_nothing_and_a_slow_candidate_times_out(
    at_once: bool,
) -> None:
    # Baseline 0.2 s against a 0.05 s deadline: it timed out, so the candidate gets 0.05 s too.
    log: list[str] = []
    b, c = SleepyEndpoint("baseline", 0.2, log), SleepyEndpoint("candidate", 0.3, log)
    pair = EndpointPair(b, c, sides_at_once=at_once, isolate=False, timeout_factor=3.0)
    got_b, got_c = _both(pair, deadline_s=0.05)
    assert got_b.ok is False  # the baseline itself is beyond the plain deadline
    assert timed_out(got_b)
    # ...so its answer does not scale anything: both judged on the plain deadline.
    assert timed_out(got_c)
    assert pair.hung(c) is False


@pytest.mark.parametrize("at_once", [True, False], ids=["at-once", "in-turn"])
def test_the_candidate_gets_the_deadline_scaled_to_the_baseline_answer(at_once: bool) -> None:
    log: list[str] = []
    b, c = SleepyEndpoint("baseline", 0.1, log), SleepyEndpoint("candidate", 0.25, log)
    pair = EndpointPair(b, c, sides_at_once=at_once, isolate=False, timeout_factor=3.0)
    got_b, got_c = _both(pair, deadline_s=0.15)
    assert got_b.ok
    assert got_c.ok, got_c.error  # 0.25 s < 3 × the baseline's 0.1 s
    # 3 × the baseline's answer as measured: its 0.1 s sleep and whatever the host added to it
    # (0.121 s once on two busy test workers, so 0.36 s, not 0.3 s).
    took_s = got_b.timing.e2el_ms / 1e3  # type: ignore[operator]
    assert took_s >= 0.1
    scaled = pytest.approx(3.0 * took_s, rel=1e-6)
    if at_once:
        # Started beside the baseline with the plain deadline, cut at 0.15 s, sent again with
        # the scaled one once the baseline's answer was in.
        assert log[:2] == ["baseline start", "candidate start"]
        assert c.deadlines[0] == 0.15
        assert c.deadlines[1] == scaled
    else:
        assert log[:2] == ["baseline start", "baseline done"]
        assert c.deadlines == [scaled]


@pytest.mark.parametrize("at_once", [True, False], ids=["at-once", "in-turn"])
def test_a_hung_candidate_times_out_after_the_scaled_deadline_twice(at_once: bool) -> None:
    log: list[str] = []
    b, c = SleepyEndpoint("baseline", 0.1, log), SleepyEndpoint("candidate", 30.0, log)
    pair = EndpointPair(b, c, sides_at_once=at_once, isolate=False, hung_after=1)
    _, got_c = _both(pair, deadline_s=0.15)
    assert timed_out(got_c)
    scaled = [d for d in c.deadlines if d is not None and d > 0.15]
    assert len(scaled) == 2  # the scaled deadline and its one retry, as in turn
    assert pair.hung(c)
    assert _both(pair, deadline_s=0.15)[1].error.category is ErrorCategory.NOT_SENT  # type: ignore[union-attr]


def test_a_fast_candidate_answers_while_the_baseline_is_still_working() -> None:
    log: list[str] = []
    b, c = SleepyEndpoint("baseline", 0.2, log), SleepyEndpoint("candidate", 0.05, log)
    pair = EndpointPair(b, c, isolate=False)
    got_b, got_c = _both(pair, deadline_s=5.0)
    assert got_b.ok and got_c.ok  # noqa: PT018
    assert log == ["baseline start", "candidate start", "candidate done", "baseline done"]
    assert c.deadlines == [5.0]


def test_one_server_reached_as_both_sides_is_served_in_turn() -> None:
    log: list[str] = []
    b = SleepyEndpoint("baseline", 0.05, log, url="http://127.0.0.1:8000/v1")
    c = SleepyEndpoint("candidate", 0.05, log, url="http://127.0.0.1:8000/v1/")
    pair = EndpointPair(b, c, isolate=False)
    assert pair.at_once is False
    _both(pair, deadline_s=5.0)
    assert log == ["baseline start", "baseline done", "candidate start", "candidate done"]


def test_an_error_in_one_side_is_raised_as_itself_not_as_a_group() -> None:
    class Broken(SleepyEndpoint):
        async def chat(
            self, body: Mapping[str, Any], *, deadline_s: float | None = None
        ) -> Completion:
            raise OSError("disk full")

    log: list[str] = []
    pair = EndpointPair(Broken("baseline", 0, log), SleepyEndpoint("candidate", 0.05, log))
    with pytest.raises(OSError, match="disk full"):
        _both(pair, deadline_s=5.0)
