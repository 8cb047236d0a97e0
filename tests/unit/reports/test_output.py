"""Report files: paths checked before work, every format written atomically (FAULTS 41, 51)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from servegate.reports.output import OutputPathError, check_output, check_outputs, write_reports
from servegate.verdict.model import Report


@pytest.mark.parametrize(
    ("relative", "message"),
    [
        ("../escape.html", "may not climb out with '..'"),
        ("sub/../../x.html", "may not climb out with '..'"),
        ("missing/report.html", "the folder missing does not exist"),
        ("a-file/report.html", "the folder a-file is not a folder"),
        ("a-dir", "is a directory, not a file"),
        ("bad\x1bname.html", "control characters in the file name"),
        ("", "not a file name"),
    ],
    ids=["dotdot", "dotdot-inside", "missing-folder", "file-as-folder", "directory", "escape",
         "empty"],
)  # fmt: skip
def test_a_bad_path_is_refused_with_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, relative: str, message: str
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a-dir").mkdir()
    (tmp_path / "a-file").write_text("x")
    with pytest.raises(OutputPathError, match=message) as caught:
        check_output(Path(relative), "--html")
    assert "\n" not in str(caught.value)
    assert "\x1b" not in str(caught.value)
    assert caught.value.exit_code == 2


def test_an_absolute_path_in_an_existing_folder_is_fine(tmp_path: Path) -> None:
    assert check_output(tmp_path / "r.html", "--html") == tmp_path / "r.html"


def test_two_formats_may_not_share_a_file(tmp_path: Path) -> None:
    with pytest.raises(OutputPathError, match="--json and --html name the same file"):
        check_outputs({"json": tmp_path / "r", "html": tmp_path / "." / "r", "junit": None})


def test_every_format_is_written_and_readable(failing_report: Report, tmp_path: Path) -> None:
    outputs = {fmt: tmp_path / f"r.{fmt}" for fmt in ("json", "html", "markdown", "junit")}
    write_reports(failing_report, outputs, latencies_ms={"baseline": [1.0, 2.0]})
    assert json.loads(outputs["json"].read_text())["run_id"] == "0123456789ab"
    assert outputs["html"].read_text().startswith("<!DOCTYPE html>")
    assert "<polyline" in outputs["html"].read_text()
    assert outputs["markdown"].read_text().startswith("## servegate: ❌ FAIL")
    assert ET.parse(outputs["junit"]).getroot().tag == "testsuites"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in outputs.values())


_WRITER = """
import sys
from pathlib import Path
from servegate.reports.json_report import write_atomic
text = "x" * (400 * 1024 * 1024)
print("ready", flush=True)
write_atomic(Path(sys.argv[1]), text)
"""


@pytest.mark.slow
def test_a_write_killed_midway_leaves_the_old_report_intact(tmp_path: Path) -> None:
    target = tmp_path / "report.html"
    target.write_text("the old report\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    with subprocess.Popen([sys.executable, "-c", _WRITER, str(target)], env=env,
                          stdout=subprocess.PIPE, text=True) as child:  # fmt: skip
        try:
            assert child.stdout is not None
            assert child.stdout.readline().strip() == "ready"
            deadline = time.monotonic() + 60
            while not any(p.name.startswith(".report.html.") for p in tmp_path.iterdir()):
                assert child.poll() is None, "the writer finished before it could be killed"
                assert time.monotonic() < deadline
                time.sleep(0.001)
        finally:
            os.kill(child.pid, signal.SIGKILL)  # our own child, by its pid
    assert child.returncode == -signal.SIGKILL
    assert target.read_text() == "the old report\n"
