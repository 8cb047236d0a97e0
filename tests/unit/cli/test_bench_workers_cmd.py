"""`servegate bench --workers` refuses a bad N with one line and exit 2 before sending anything."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from click.testing import CliRunner

from servegate.cli.bench_cmd import bench_command


@pytest.fixture
def closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--workers", "0"], "--workers: 0 must be >= 1"),
        (["--workers", "-2"], "--workers: -2 must be >= 1"),
        (["--workers", "2", "--rate", "4"], "--workers 2: only closed-loop steps"),
        (["--workers", "2", "--ramp", "1:4"], "--workers 2: only closed-loop steps"),
    ],
    ids=["zero", "negative", "open-loop", "ramp"],
)
def test_a_bad_worker_count_is_one_line_and_exit_2(
    tmp_path: Path, closed_port_url: str, args: list[str], message: str
) -> None:
    out = tmp_path / "out.json"
    result = CliRunner().invoke(
        bench_command, ["--endpoint", closed_port_url, "--json", str(out), *args]
    )
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, result.output
    assert message in lines[0]
    assert not out.exists()
