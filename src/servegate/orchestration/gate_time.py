"""Where each gate's time went: the run's recorder, counting every request by gate, side and part
on its way to the store, with the interval it was in flight.

A part is what a request was for (`endpoints.recording.part`: "noise floor", "prompt scoring",
"load blocks"; isolation requests are their own part). A part's seconds are the union of its
requests' intervals on both sides, from the request's own perf_counter stamps (from when it asked
for a connection to its last byte): eight requests in flight at once count once, and a part the
baseline and the candidate worked on at the same time counts its wall time, not the sum.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from collections.abc import Iterable
from typing import Any

from servegate.endpoints.recording import Recorder, part_of
from servegate.endpoints.types import Timing
from servegate.verdict.model import GateTime, PartTime

__all__ = ["TimeRecorder", "union_s"]

Interval = tuple[int, int]  # perf_counter_ns


def union_s(intervals: Iterable[Interval]) -> float:
    """Seconds covered by the intervals, overlaps counted once."""
    total, end = 0, None
    for a, b in sorted(intervals):
        if end is not None and b <= end:
            continue
        total += b - (a if end is None else max(a, end))
        end = b
    return total / 1e9


def _interval(timing: Timing, recorded_ns: int) -> Interval | None:
    """From when the request asked for a connection (or was sent) to its last byte; None for a
    request that was never sent (`sent_ns` 0)."""
    if not timing.sent_ns:
        return None
    start = timing.queued_ns or timing.sent_ns
    end = timing.done_ns or (timing.token_chunk_ns[-1] if timing.token_chunk_ns else recorded_ns)
    return start, max(start, end)


class TimeRecorder:
    """The run's recorder, counting each request by gate, side and part on its way."""

    def __init__(self, inner: Recorder) -> None:
        self.inner = inner
        self.counts: Counter[tuple[str, str]] = Counter()
        self._parts: Counter[tuple[str, str, str]] = Counter()  # (gate, part, side)
        self._spans: defaultdict[tuple[str, str], list[Interval]] = defaultdict(list)
        self._sides: defaultdict[tuple[str, str], list[Interval]] = defaultdict(list)

    def record(self, **fields: Any) -> None:
        """Count the request, keep its interval, then hand it on unchanged."""
        gate, side = fields["gate"], fields["side"]
        name = part_of(fields["probe"])
        self.counts[gate, side] += 1
        self._parts[gate, name, side] += 1
        span = _interval(fields["result"].timing, time.perf_counter_ns())
        if span is not None:
            self._spans[gate, name].append(span)
            self._sides[gate, side].append(span)
        self.inner.record(**fields)

    def of(self, gate: str) -> dict[str, int]:
        """The gate's requests per side."""
        return {side: n for (g, side), n in sorted(self.counts.items()) if g == gate}

    def parts(self, gate: str) -> list[PartTime]:
        """The gate's parts, the longest first."""
        sides: defaultdict[str, dict[str, int]] = defaultdict(dict)
        for (g, name, side), n in sorted(self._parts.items()):
            if g == gate:
                sides[name][side] = n
        out = [
            PartTime(part=name, seconds=round(union_s(self._spans[gate, name]), 3), requests=n)
            for name, n in sides.items()
        ]
        return sorted(out, key=lambda p: (-p.seconds, p.part))

    def time(self, gate: str, seconds: float) -> GateTime:
        parts = tuple(self.parts(gate))
        busy = {
            side: round(union_s(spans), 3)
            for (g, side), spans in sorted(self._sides.items())
            if g == gate
        }
        return GateTime(seconds=round(seconds, 3), requests=self.of(gate), parts=parts, busy=busy)
