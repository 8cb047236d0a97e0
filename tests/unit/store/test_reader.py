"""Reading runs back: by id or unique prefix, their report, their recorded latencies."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from sqlalchemy import Engine

from servegate.endpoints.errors import ErrorCategory, RequestError
from servegate.endpoints.types import Completion, Timing
from servegate.reports.json_report import dump_report
from servegate.store.reader import find_run, request_latencies, stored_report
from servegate.store.writer import RunWriter, StoreError, open_engine
from servegate.verdict.model import Report


def _start(db: str | Path | Engine) -> RunWriter:
    engine = db if isinstance(db, Engine) else open_engine(db)
    return RunWriter.start(engine, baseline_url="http://b/v1",
                           candidate_url="http://c/v1", model="m", config={})  # fmt: skip


def _storable(report: Report, run_id: str) -> Report:
    # Lone surrogates cannot be stored (sqlite refuses them); the JSON dump replaces them.
    return Report.model_validate_json(dump_report(report)).model_copy(update={"run_id": run_id})


def test_a_finished_run_gives_back_its_report(store_url: str, failing_report: Report) -> None:
    writer = _start(store_url)
    report = _storable(failing_report, writer.run_id)
    writer.finish(report)
    assert stored_report(writer.engine, writer.run_id) == report
    assert stored_report(writer.engine, writer.run_id[:5]) == report


def test_a_crashed_run_has_no_report_and_says_why(store_url: str) -> None:
    writer = _start(store_url)
    writer.crashed("RuntimeError: boom")
    with pytest.raises(StoreError) as caught:
        stored_report(writer.engine, writer.run_id)
    assert (
        str(caught.value)
        == f"run {writer.run_id} has no report (it is crashed: RuntimeError: boom)"
    )
    assert caught.value.exit_code == 2


@pytest.mark.parametrize("ref", ["nope", "abc", "x\x1b[2J"], ids=["unknown", "short", "escape"])
def test_an_unknown_run_is_one_line_naming_it(store_url: str, ref: str) -> None:
    engine = _start(store_url).engine
    with pytest.raises(
        StoreError, match=r"^no run .* in .*(runs.db|/t_\w+) \(see `servegate runs`\)$"
    ) as caught:
        find_run(engine, ref)
    assert "\x1b" not in str(caught.value)


def test_an_ambiguous_prefix_is_refused_and_wildcards_match_nothing(
    store_url: str, engine: Engine, sql: Callable[[str, str], None]
) -> None:
    db = store_url
    first, second = _start(engine).run_id, _start(engine).run_id
    sql(db, f"update runs set id = 'abcd0001' where id = '{first}'")
    sql(db, f"update runs set id = 'abcd0002' where id = '{second}'")
    with pytest.raises(StoreError, match="run abcd is ambiguous"):
        find_run(engine, "abcd")
    assert find_run(engine, "abcd0002")["id"] == "abcd0002"
    with pytest.raises(StoreError, match="no run"):
        find_run(engine, "%%%%")


def test_a_foreign_report_is_refused_with_its_first_problem(
    store_url: str, sql: Callable[[str, str], None]
) -> None:
    writer = _start(store_url)
    sql(store_url, """update runs set report_json = '{"verdict": "maybe"}'""")
    with pytest.raises(StoreError, match="its stored report cannot be read by this version"):
        stored_report(writer.engine, writer.run_id)


def test_latencies_come_from_the_recorded_requests(store_url: str) -> None:
    writer = _start(store_url)
    for side, ms in (("baseline", 10), ("candidate", 30), ("baseline", 20)):
        done = Completion(status=200, content="OK", timing=Timing(sent_ns=0, done_ns=ms * 10**6))
        writer.record(gate="golden", probe="p", side=side, api="chat", request={}, result=done)
    timed = Timing(sent_ns=0, done_ns=5 * 10**6)
    failed = Completion(status=500, timing=timed, error=RequestError(ErrorCategory.SERVER, "500"))
    isolation = Completion(status=200, content="x", timing=timed)
    writer.record(gate="golden", probe="p", side="candidate", api="chat", request={},
                  result=failed)  # fmt: skip
    writer.record(gate="golden", probe="p:isolation", side="candidate", api="chat", request={},
                  result=isolation)  # fmt: skip
    assert request_latencies(writer.engine, writer.run_id) == {
        "baseline": [10.0, 20.0], "candidate": [30.0]
    }  # fmt: skip
