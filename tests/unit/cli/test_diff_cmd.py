"""`servegate diff RUN_A RUN_B`: a table or JSON of changes; exit 0 same, 1 changed, 2 error."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from click.testing import CliRunner

from servegate.cli.diff_cmd import diff
from servegate.verdict.model import Report

StoreRun = Callable[..., str]


def test_a_fixed_candidate_shows_what_changed(
    tmp_path: Path, failing_report: Report, passing_report: Report, store_run: StoreRun
) -> None:
    db = tmp_path / "runs.db"
    a, b = store_run(db, failing_report), store_run(db, passing_report)
    result = CliRunner().invoke(diff, [a, b, "--db", str(db), "--json"])
    assert result.exit_code == 1, result.output
    data = json.loads(result.output)
    assert (data["run_a"], data["run_b"], data["same"]) == (a, b, False)
    assert data["changes"][0] == {"kind": "verdict", "gate": "", "item": "verdict",
                                  "field": "verdict", "a": "fail", "b": "pass"}  # fmt: skip
    kinds = {c["kind"] for c in data["changes"]}
    assert kinds == {"verdict", "gate", "check", "row", "finding"}


def test_the_table_escapes_server_text(
    tmp_path: Path, failing_report: Report, passing_report: Report, store_run: StoreRun
) -> None:
    db = tmp_path / "runs.db"
    a, b = store_run(db, failing_report), store_run(db, passing_report)
    result = CliRunner().invoke(diff, [a, b, "--db", str(db)])
    assert result.exit_code == 1
    assert f"{a} → {b}:" in result.output
    assert "\x1b" not in result.output
    assert "canary-ok" in result.output
    assert "18 change(s)" in result.output


def test_a_run_against_itself_is_no_change(
    tmp_path: Path, failing_report: Report, store_run: StoreRun
) -> None:
    db = tmp_path / "runs.db"
    a = store_run(db, failing_report)
    result = CliRunner().invoke(diff, [a, a, "--db", str(db)])
    assert result.exit_code == 0
    assert result.output == f"runs {a} and {a}: no change\n"


def test_an_unknown_run_is_exit_2(
    tmp_path: Path, failing_report: Report, store_run: StoreRun
) -> None:
    db = tmp_path / "runs.db"
    a = store_run(db, failing_report)
    result = CliRunner().invoke(diff, [a, "0000ffff", "--db", str(db)])
    assert result.exit_code == 2
    assert result.output.startswith("servegate: error: no run 0000ffff in ")
