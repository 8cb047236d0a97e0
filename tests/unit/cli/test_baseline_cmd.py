"""`servegate baseline list|show|delete` and `gate --baseline-run`: readable, JSON for machines,
and each bad use one line with exit code 2 and the database untouched."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

from servegate.cli.baseline_cmd import baseline
from servegate.cli.gate_cmd import gate
from servegate.endpoints.types import Completion
from servegate.store.baselines import StoredBaseline, save_baseline
from servegate.store.writer import RunWriter, open_engine
from servegate.verdict.model import GateResult, Status


def _db(tmp_path: Path) -> Path:
    db = tmp_path / "runs.db"
    engine = open_engine(db)
    writer = RunWriter.start(engine, baseline_url="http://127.0.0.1:1/v1",
                             candidate_url="http://127.0.0.1:1/v1", model="m\x1b[31m",
                             config={})  # fmt: skip
    # SmolLM2's answer to this tool probe: stored, never the baseline's truth.
    writer.record(gate="golden", probe="tools-single-auto", side="baseline", api="chat",
                  request={}, result=Completion(status=200, content=""))  # fmt: skip
    writer.gate(GateResult(name="golden", status=Status.PASS, summary="ok"))
    run_id = writer.run_id
    save_baseline(engine, StoredBaseline(
        name="v1", run_id=run_id, created_at="2026-12-01T10:00:00+00:00",
        endpoint_url="http://127.0.0.1:1/v1", model="m\x1b[31m",
        fingerprints={"suite": "default v3 sha256:abc", "servegate": "0.3.0"},
        config={"gates": ["startup", "golden"], "policy": {"noise_k": 3.0}},
    ))  # fmt: skip
    return db


def test_list_and_show_print_the_baseline_for_people_and_machines(tmp_path: Path) -> None:
    db = _db(tmp_path)
    listed = CliRunner().invoke(baseline, ["list", "--db", str(db), "--json"])
    assert listed.exit_code == 0, listed.output
    [row] = json.loads(listed.output)
    assert (row["name"], row["gates"], row["suite"]) == ("v1", ["startup", "golden"],
                                                         "default v3 sha256:abc")  # fmt: skip
    people = CliRunner().invoke(baseline, ["list", "--db", str(db)])
    assert "\x1b" not in people.output  # a model id's escape sequence is shown, not acted on
    assert "m\\x1b[31m" in people.output
    shown = CliRunner().invoke(baseline, ["show", "v1", "--db", str(db), "--json"])
    assert json.loads(shown.output)["config"]["policy"] == {"noise_k": 3.0}
    assert json.loads(shown.output)["left_out"] == ["golden/tools-single-auto (empty)"]
    text = CliRunner().invoke(baseline, ["show", "v1", "--db", str(db)])
    assert "left out   1 probe(s): golden/tools-single-auto (empty)" in text.output


def _dump(db: Path) -> list[str]:
    with sqlite3.connect(db) as conn:
        return list(conn.iterdump())


@pytest.mark.parametrize(
    ("command", "args", "message"),
    [
        (baseline, ["show", "v2"], "no baseline 'v2' in {db} (see `servegate baseline list`)"),
        (baseline, ["delete", "v2"], "no baseline 'v2' in {db} (see `servegate baseline list`)"),
        (gate, ["--baseline-run", "v2", "--candidate", "http://127.0.0.1:9/v1"],
         "no baseline 'v2' in {db} (see `servegate baseline list`)"),
        (gate, ["--baseline-run", "v1", "--candidate", "http://127.0.0.1:9/v1", "--baseline",
                "http://127.0.0.1:8/v1"],
         "--baseline-run replaces --baseline: give it with --candidate only (not with "
         "--baseline-replica, --resume or --config)"),
        (gate, ["--baseline-run", "v1"], "--baseline-run NAME needs --candidate URL"),
        (gate, ["--baseline-run", "v1", "--candidate", "http://127.0.0.1:9/v1", "--no-store"],
         "--baseline-run needs the database that holds it: drop --no-store"),
    ],
    ids=["show-unknown", "delete-unknown", "gate-unknown", "with-baseline", "no-candidate",
         "no-store"],
)  # fmt: skip
def test_a_bad_baseline_use_is_one_line_with_exit_2_and_the_database_untouched(
    tmp_path: Path, command: object, args: list[str], message: str
) -> None:
    db = _db(tmp_path)
    before = _dump(db)
    result = CliRunner().invoke(command, [*args, "--db", str(db)])  # type: ignore[arg-type]
    assert result.exit_code == 2, result.output
    assert result.output.strip().splitlines() == [f"servegate: error: {message.format(db=db)}"]
    assert _dump(db) == before


def test_delete_forgets_the_name_and_keeps_the_recorded_run(tmp_path: Path) -> None:
    db = _db(tmp_path)
    result = CliRunner().invoke(baseline, ["delete", "v1", "--db", str(db)])
    assert (result.exit_code, result.output) == (0, "deleted baseline 'v1'\n")
    with sqlite3.connect(db) as conn:
        assert conn.execute("select count(*) from baselines").fetchone() == (0,)
        assert conn.execute("select count(*) from runs").fetchone() == (1,)


def test_gate_help_calls_performance_against_a_stored_baseline_not_applicable() -> None:
    # Issue 25: against a recording the performance gate is skipped as not applicable (neither a
    # pass nor a gap); the help called it "not measured", which is a gap (inconclusive).
    shown = CliRunner().invoke(gate, ["--help"], terminal_width=400)
    assert shown.exit_code == 0, shown.output
    text = " ".join(shown.output.split())
    assert "the performance gate is not applicable to it (skipped with its reason)" in text
    assert "performance gate is not measured" not in text
