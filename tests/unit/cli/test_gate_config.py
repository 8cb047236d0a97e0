"""`servegate gate --config FILE`: the file's settings, with options given on the command line
on top and options left at their defaults leaving the file alone."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from click.testing import CliRunner

from servegate.cli.gate_cmd import gate
from servegate.cli.gate_options import Duration


def _closed_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}/v1"


def _config(tmp_path: Path, extra: str = "") -> Path:
    path = tmp_path / "gate.yaml"
    path.write_text(f"baseline: {{url: '{_closed_url()}'}}\n"
                    f"candidate: {{url: '{_closed_url()}'}}\n{extra}")  # fmt: skip
    return path


def _gate(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(gate, [*args, "--no-store", "--quiet"])
    return result.exit_code, result.output


def test_the_file_is_read_and_its_endpoints_are_used(tmp_path: Path) -> None:
    code, out = _gate("--config", str(_config(tmp_path)), "--probe-deadline-s", "2")
    assert code == 3  # both endpoints in the file are closed ports: unreachable
    assert "baseline http://127.0.0.1:" in out
    assert "unreachable" in out


def test_an_option_left_at_its_default_does_not_override_the_file(tmp_path: Path) -> None:
    path = _config(tmp_path, "numerics_prompts: 0\n")
    code, out = _gate("--config", str(path))
    assert code == 2
    assert f"{path}: numerics_prompts: Input should be greater than or equal to 1" in out


def test_an_option_given_on_the_command_line_overrides_the_file(tmp_path: Path) -> None:
    path = _config(tmp_path, "numerics_prompts: 0\n")
    code, out = _gate("--config", str(path), "--numerics-prompts", "3", "--probe-deadline-s", "2")
    assert code == 3, out  # valid now: it got as far as the (closed) endpoints


def test_a_bad_file_writes_no_database(tmp_path: Path) -> None:
    path = _config(tmp_path, "numerics_prompts: 0\n")
    db = tmp_path / "runs.db"
    result = CliRunner().invoke(gate, ["--config", str(path), "--db", str(db), "--quiet"])
    assert result.exit_code == 2, result.output
    assert "numerics_prompts" in result.output
    assert not db.exists()
    assert list(tmp_path.iterdir()) == [path]


def test_a_budget_is_read_as_a_duration(tmp_path: Path) -> None:
    path = _config(tmp_path)
    code, out = _gate("--config", str(path), "--budget", "4m30s", "--probe-deadline-s", "2")
    assert code == 3, out  # accepted: it got as far as the (closed) endpoints
    code, out = _gate("--config", str(path), "--budget", "5 minutes")
    assert code == 2
    assert "'5 minutes' is not a duration (300, 300s, 5m, 4m30s, 1h)" in out
    code, out = _gate("--config", str(path), "--budget", "0s")
    assert code == 2
    assert "a duration must be more than 0 seconds" in out
    code, out = _gate("--config", str(_config(tmp_path, "budget_s: -5\n")))
    assert code == 2
    assert "budget_s: Input should be greater than 0" in out


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("300", 300.0), ("300s", 300.0), ("5m", 300.0), ("4m30s", 270.0), ("1h", 3600.0),
     ("1.5m", 90.0), (" 2M ", 120.0)],
)  # fmt: skip
def test_a_duration_s_seconds(text: str, seconds: float) -> None:
    assert Duration().convert(text, None, None) == seconds
