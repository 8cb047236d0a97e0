import json
import sqlite3
from pathlib import Path

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


def test_each_request_is_committed_as_it_completes(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    writer = RunWriter.start(
        open_engine(db),
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
    # Read with a separate plain sqlite3 connection: the row is visible before the run ends.
    rows = sqlite3.connect(db).execute("select probe, side, content from requests").fetchall()
    assert rows == [("canary-ok", "candidate", ",,,,")]
    assert sqlite3.connect(db).execute("pragma journal_mode").fetchone() == ("wal",)


def test_lone_surrogates_are_stored_not_rejected(tmp_path: Path) -> None:
    engine = open_engine(tmp_path / "runs.db")
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


def test_finished_run_is_listed_with_its_verdict(tmp_path: Path) -> None:
    engine = open_engine(tmp_path / "runs.db")
    writer = RunWriter.start(engine, baseline_url="b", candidate_url="c", model=None, config={})
    writer.finish(_report(writer.run_id))
    [row] = list_runs(engine)
    assert (row["id"], row["verdict"], row["exit_code"], row["state"]) == (
        writer.run_id,
        "fail",
        1,
        "finished",
    )
    assert json.loads(row["report_json"])["schema_version"] == SCHEMA_VERSION == 2


def test_a_lone_surrogate_in_server_text_does_not_lose_the_report(tmp_path: Path) -> None:
    # A model id from /v1/models with a lone surrogate is valid JSON but not valid UTF-8.
    engine = open_engine(tmp_path / "runs.db")
    writer = RunWriter.start(
        engine, baseline_url="http://b/v1", candidate_url="http://c/v1", model="m", config={}
    )
    odd = Fingerprint(url="http://b/v1", model="m\udc80")
    report = Report(
        tool="servegate", run_id=writer.run_id, started_at="t", finished_at="t", duration_s=1.0,
        verdict=Status.PASS, exit_code=0, reason="ok", baseline=odd, candidate=odd, gates=(),
    )  # fmt: skip
    writer.finish(report)
    with sqlite3.connect(tmp_path / "runs.db") as conn:
        (stored,) = conn.execute("select report_json from runs").fetchone()
    model = json.loads(stored)["baseline"]["model"]
    assert model[0] == "m"
    assert set(model[1:]) == {"\ufffd"}  # the lone surrogate, replaced
