"""The writer on SQLite and on PostgreSQL: each row committed as it completes."""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

from servegate.endpoints.errors import ErrorCategory, RequestError
from servegate.endpoints.types import Completion
from servegate.store.writer import RunWriter, list_runs, open_engine
from servegate.verdict.model import SCHEMA_VERSION, Fingerprint, GateResult, Report, Status


def _report(run_id: str) -> Report:
    fp = Fingerprint(url="http://b/v1")
    return Report(
        tool="servegate test",
        run_id=run_id,
        started_at="t0",
        finished_at="t1",
        duration_s=1.0,
        verdict=Status.FAIL,
        exit_code=1,
        reason="failed: golden",
        baseline=fp,
        candidate=fp,
        gates=(GateResult(name="golden", status=Status.FAIL, summary="x"),),
    )


Rows = Callable[[str, str], list[tuple[Any, ...]]]


def test_each_request_is_committed_as_it_completes(store_url: str, rows: Rows) -> None:
    writer = RunWriter.start(
        open_engine(store_url),
        baseline_url="http://b/v1",
        candidate_url="http://c/v1",
        model="m",
        config={"k": 1},
    )
    writer.record(
        gate="golden",
        probe="canary-ok",
        side="candidate",
        api="chat",
        request={"messages": []},
        result=Completion(status=200, content=",,,,"),
    )
    # Read with a separate connection: the row is visible before the run ends.
    assert rows(store_url, "select probe, side, content from requests") == [
        ("canary-ok", "candidate", ",,,,")
    ]
    assert rows(store_url, "select state, pid from runs") == [("running", os.getpid())]


def test_sqlite_is_written_in_wal_mode(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    open_engine(db).dispose()
    assert sqlite3.connect(db).execute("pragma journal_mode").fetchone() == ("wal",)


def test_lone_surrogates_are_stored_not_rejected(store_url: str) -> None:
    engine = open_engine(store_url)
    writer = RunWriter.start(engine, baseline_url="b", candidate_url="c", model=None, config={})
    err = RequestError(ErrorCategory.SERVER, "bad \ud800 thing", status=500)
    writer.record(
        gate="g",
        probe="p",
        side="baseline",
        api="chat",
        request={},
        result=Completion(status=500, content="x\udc00y", error=err),
    )
    assert list_runs(engine)[0]["requests"] == 1


def test_finished_run_is_listed_with_its_verdict(store_url: str) -> None:
    engine = open_engine(store_url)
    writer = RunWriter.start(engine, baseline_url="b", candidate_url="c", model=None, config={})
    writer.finish(_report(writer.run_id))
    [row] = list_runs(engine)
    assert (row["id"], row["verdict"], row["exit_code"], row["state"]) == (
        writer.run_id,
        "fail",
        1,
        "finished",
    )
    assert json.loads(row["report_json"])["schema_version"] == SCHEMA_VERSION == 4


def test_a_lone_surrogate_in_server_text_does_not_lose_the_report(
    store_url: str, rows: Rows
) -> None:
    # A model id from /v1/models with a lone surrogate is valid JSON but not valid UTF-8.
    engine = open_engine(store_url)
    writer = RunWriter.start(
        engine, baseline_url="http://b/v1", candidate_url="http://c/v1", model="m", config={}
    )
    odd = Fingerprint(url="http://b/v1", model="m\udc80")
    report = Report(
        tool="servegate", run_id=writer.run_id, started_at="t", finished_at="t", duration_s=1.0,
        verdict=Status.PASS, exit_code=0, reason="ok", baseline=odd, candidate=odd, gates=(),
    )  # fmt: skip
    writer.finish(report)
    [(stored,)] = rows(store_url, "select report_json from runs")
    model = json.loads(stored)["baseline"]["model"]
    assert model[0] == "m"
    assert set(model[1:]) == {"\ufffd"}  # the lone surrogate, replaced


def test_nul_and_lone_surrogates_in_server_text_are_stored_on_every_backend(
    store_url: str, rows: Rows
) -> None:
    # PostgreSQL text cannot hold NUL; neither backend's driver takes a lone surrogate. The text
    # columns mark the spot with U+FFFD; the JSON columns keep the exact text, escaped.
    engine = open_engine(store_url)
    writer = RunWriter.start(engine, baseline_url="b", candidate_url="c", model="m\x00",
                             config={"k": "\x00"})  # fmt: skip
    err = RequestError(ErrorCategory.SERVER, "bad\x00 \ud800 thing", status=500)
    writer.record(gate="g", probe="p", side="baseline", api="chat", request={"x": "\x00"},
                  result=Completion(status=500, content="a\x00b\udc80c", finish_reason="st\x00p",
                                    error=err))  # fmt: skip
    writer.fail("server said \x00", 4)
    [(content, message, finish, result)] = rows(
        store_url, "select content, error_message, finish_reason, result_json from requests"
    )
    # (a lone surrogate's three UTF-8 bytes become three U+FFFD)
    assert (content, message, finish) == (
        "a\ufffdb\ufffd\ufffd\ufffdc", "bad\ufffd \ufffd\ufffd\ufffd thing", "st\ufffdp"
    )  # fmt: skip
    assert json.loads(result)["finish_reason"] == "st\x00p"
    assert rows(store_url, "select model, reason, state from runs") == [
        ("m\ufffd", "server said \ufffd", "error")
    ]
