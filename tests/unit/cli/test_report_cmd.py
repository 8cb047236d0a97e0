"""`servegate report RUN` renders a stored run; `servegate gate` refuses a bad report path first."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

from servegate.cli.gate_cmd import gate
from servegate.cli.report_cmd import report
from servegate.store.writer import RunWriter, open_engine
from servegate.verdict.model import Report

StoreRun = Callable[..., str]


def test_every_format_of_a_stored_run(
    tmp_path: Path, failing_report: Report, store_run: StoreRun
) -> None:
    db = tmp_path / "runs.db"
    run_id = store_run(db, failing_report, (10.0, 12.0, 20.0, 45.0))
    files = {fmt: tmp_path / f"out.{fmt}" for fmt in ("html", "markdown", "junit", "json")}
    args = [run_id[:6], "--db", str(db)] + [a for f, p in files.items() for a in (f"--{f}", str(p))]
    result = CliRunner().invoke(report, args)
    assert result.exit_code == 0, result.output
    assert json.loads(files["json"].read_text())["run_id"] == run_id
    html = files["html"].read_text()
    assert html.count("<polyline") == 2  # the recorded latencies, one line per side
    assert "baseline (n=2)" in html
    assert files["markdown"].read_text().startswith("## servegate: ❌ FAIL — roll back\n")
    assert ET.parse(files["junit"]).getroot().get("failures") == "7"
    assert f"HTML report: {files['html']}" in result.output


def test_without_a_file_the_report_is_printed_with_escapes_neutralised(
    tmp_path: Path, failing_report: Report, store_run: StoreRun
) -> None:
    db = tmp_path / "runs.db"
    fp = failing_report.baseline.model_copy(update={"model": "evil\x1b]0;owned\x07\x1b[2J"})
    run_id = store_run(db, failing_report.model_copy(update={"baseline": fp}))
    result = CliRunner().invoke(report, [run_id, "--db", str(db)])
    assert result.exit_code == 0, result.output
    assert "\x1b" not in result.output
    assert "model evil\\x1b]0;owned\\x07\\x1b[2J" in result.output
    assert "verdict: FAIL" in result.output


def test_a_crashed_run_is_one_line_naming_it(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    writer = RunWriter.start(open_engine(db), baseline_url="http://b/v1",
                             candidate_url="http://c/v1", model=None, config={})  # fmt: skip
    writer.crashed("RuntimeError: boom")
    result = CliRunner().invoke(report, [writer.run_id, "--db", str(db), "--html",
                                         str(tmp_path / "r.html")])  # fmt: skip
    assert result.exit_code == 2
    assert result.output == (
        f"servegate: error: run {writer.run_id} has no report (it is crashed: RuntimeError: boom)\n"
    )
    assert not (tmp_path / "r.html").exists()


def test_an_unknown_run_is_exit_2(tmp_path: Path) -> None:
    open_engine(tmp_path / "runs.db").dispose()  # a database without that run
    result = CliRunner().invoke(report, ["feedbeef", "--db", str(tmp_path / "runs.db")])
    assert result.exit_code == 2
    assert result.output.startswith("servegate: error: no run feedbeef in ")


@pytest.mark.parametrize(
    ("flag", "path", "message"),
    [
        ("--html", "../r.html", "a report path may not climb out with '..'"),
        ("--junit", ".", "not a file name"),
        ("--markdown", "nowhere/r.md", "the folder nowhere does not exist"),
    ],
    ids=["dotdot", "directory", "missing-folder"],
)
def test_a_bad_path_is_refused_before_the_database_is_opened(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flag: str, path: str, message: str
) -> None:
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(report, ["abcd", "--db", "runs.db", flag, path])
    assert result.exit_code == 2
    assert result.output == f"servegate: error: {flag} {path}: {message}\n"
    assert not (tmp_path / "runs.db").exists()


def test_gate_refuses_a_bad_report_path_before_any_request(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    # Port 9 answers nothing: had the gate started, this would be exit 3 (unreachable).
    args = ["--baseline", "http://127.0.0.1:9/v1", "--candidate", "http://127.0.0.1:9/v2",
            "--db", "runs.db", "--html", "out", "--junit", "out"]  # fmt: skip
    (tmp_path / "out").mkdir()
    result = CliRunner().invoke(gate, args)
    assert result.exit_code == 2
    assert result.output == "servegate: error: --html out: is a directory, not a file\n"
    assert not (tmp_path / "runs.db").exists()
