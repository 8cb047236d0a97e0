"""Where a gate's time went, part by part: what its requests were for, their seconds (overlaps
once) and their count per side."""

from __future__ import annotations

import asyncio
from typing import Any

from servegate.endpoints.recording import (
    ISOLATION_PART,
    UNNAMED_PART,
    NullRecorder,
    part,
)
from servegate.endpoints.types import Completion, Timing
from servegate.orchestration.gate_time import TimeRecorder, union_s

S = 1_000_000_000  # ns


def _answer(start_s: float, end_s: float) -> Completion:
    """An answer sent `start_s` into the run (100 s after the clock's zero: sent_ns 0 is the
    stamp of a request never sent) and done at `end_s`."""
    sent, done = int((100 + start_s) * S), int((100 + end_s) * S)
    return Completion(status=200, content="x", timing=Timing(sent_ns=sent, done_ns=done))


def _record(
    rec: TimeRecorder, side: str, result: Completion, probe: str = "p", gate: str = "g"
) -> None:
    rec.record(gate=gate, probe=probe, side=side, api="chat", request={}, result=result)


def test_overlapping_requests_count_once_and_gaps_not_at_all() -> None:
    assert union_s([(0, 2 * S), (1 * S, 3 * S)]) == 3.0  # overlap once
    assert union_s([(0, 4 * S), (1 * S, 2 * S)]) == 4.0  # nested
    assert union_s([(0, 1 * S), (5 * S, 6 * S)]) == 2.0  # the gap between is not the part's
    assert union_s([]) == 0.0


def test_each_part_has_its_seconds_and_its_requests_per_side_the_longest_first() -> None:
    rec = TimeRecorder(NullRecorder())
    with part("noise floor"):
        _record(rec, "baseline", _answer(0, 4))
        _record(rec, "baseline", _answer(4, 8))
    _record(rec, "candidate", _answer(0, 2))  # no part named: the gate's probes
    _record(rec, "baseline", _answer(8, 9))
    with part("noise floor"):
        _record(rec, "baseline", _answer(9, 10), gate="other")  # another gate's part
    parts = rec.parts("g")
    assert [(p.part, p.seconds, p.requests) for p in parts] == [
        ("noise floor", 8.0, {"baseline": 2}),
        (UNNAMED_PART, 3.0, {"baseline": 1, "candidate": 1}),
    ]
    assert rec.of("g") == {"baseline": 3, "candidate": 1}
    spent = rec.time("g", 10.4)
    assert spent.seconds == 10.4
    assert spent.parts == tuple(parts)
    # The baseline's requests back to back for 9 s: the candidate's 2 s ran beside them.
    assert spent.busy == {"baseline": 9.0, "candidate": 2.0}
    assert spent.busy_text() == "baseline busy 87%, candidate busy 19%"


async def test_two_sides_working_at_once_each_keep_their_own_part() -> None:
    rec = TimeRecorder(NullRecorder())

    async def side(name: str, label: str, start: float) -> None:
        with part(label):
            await asyncio.sleep(0)  # the other side's task runs here, under its own part
            _record(rec, name, _answer(start, start + 1))

    async with asyncio.TaskGroup() as group:
        group.create_task(side("baseline", "noise floor", 0))
        group.create_task(side("candidate", "probes of the candidate", 0.5))
    by_part = {p.part: p.requests for p in rec.parts("g")}
    assert by_part == {"noise floor": {"baseline": 1}, "probes of the candidate": {"candidate": 1}}


def test_an_isolation_request_is_its_own_part_whatever_it_isolates() -> None:
    rec = TimeRecorder(NullRecorder())
    with part("streamed"):
        _record(rec, "baseline", _answer(0, 0.1), probe="arith:stream:isolation")
        _record(rec, "baseline", _answer(0.1, 1), probe="arith:stream")
    assert {p.part for p in rec.parts("g")} == {ISOLATION_PART, "streamed"}


def test_a_request_never_sent_counts_as_a_request_without_seconds() -> None:
    rec = TimeRecorder(NullRecorder())
    _record(rec, "candidate", Completion(status=None))  # Timing(sent_ns=0): not sent
    [only] = rec.parts("g")
    assert (only.seconds, only.requests) == (0.0, {"candidate": 1})


def test_every_request_is_handed_on_unchanged() -> None:
    seen: list[dict[str, Any]] = []

    class Keep:
        def record(self, **fields: Any) -> None:
            seen.append(fields)

    rec = TimeRecorder(Keep())
    answer = _answer(0, 1)
    _record(rec, "baseline", answer, probe="q")
    assert seen == [{"gate": "g", "probe": "q", "side": "baseline", "api": "chat",
                     "request": {}, "result": answer}]  # fmt: skip
