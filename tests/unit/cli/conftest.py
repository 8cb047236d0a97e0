"""A finished run in a real run database, holding a report as the runner stores it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from servegate.endpoints.types import Completion, Timing
from servegate.reports.json_report import dump_report
from servegate.store.writer import RunWriter, open_engine
from servegate.verdict.model import Report


@pytest.fixture
def store_run() -> Callable[..., str]:
    """`store_run(db, report, latencies_ms=())`: the id of a new finished run holding `report`,
    with one recorded request per latency (alternating baseline, candidate)."""

    def store_run(db: Path, source: Report, latencies_ms: tuple[float, ...] = ()) -> str:
        """A finished run holding `source` (as the runner stores it) and its timed requests."""
        writer = RunWriter.start(open_engine(db), baseline_url="http://b/v1",
                                 candidate_url="http://c/v1", model="m", config={})  # fmt: skip
        for i, ms in enumerate(latencies_ms):
            done = Completion(status=200, content="OK", timing=Timing(0, done_ns=int(ms * 1e6)))
            side = ("baseline", "candidate")[i % 2]
            writer.record(gate="golden", probe="p", side=side, api="chat", request={}, result=done)
        stored = Report.model_validate_json(dump_report(source))
        writer.finish(stored.model_copy(update={"run_id": writer.run_id}))
        return writer.run_id

    return store_run
