"""`servegate gate --slo … --capacity-concurrency …`: bad values stop the run before anything
is sent or written, with one line naming the option."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from click.testing import CliRunner

from servegate.cli.gate_cmd import gate


def _closed_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}/v1"


def _gate(tmp_path: Path, *args: str) -> tuple[int, str]:
    db = tmp_path / "runs.db"
    argv = ["--baseline", _closed_url(), "--candidate", _closed_url(), "--db", str(db),
            "--json", str(tmp_path / "out.json"), "--probe-deadline-s", "2", "--quiet"]  # fmt: skip
    argv += args
    result = CliRunner().invoke(gate, argv)
    return result.exit_code, result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--slo", "ttft_ms=fast"), "--slo: ttft_ms='fast': not a number of milliseconds"),
        (("--slo", "p95_ms=500"), "--slo: unknown SLO key 'p95_ms'"),
        (("--slo", "ttft_ms=-1"), "--slo: ttft_ms=-1: must be a positive, finite number"),
        (("--capacity-concurrency", "1,0,4"), "--capacity-concurrency: 0 is not a positive"),
        (("--capacity-concurrency", "1,two"), "--capacity-concurrency: 'two' is not an integer"),
        (("--capacity-concurrency", "4,2"), "--capacity-concurrency: '4,2' must ascend"),
    ],
    ids=[
        "slo-not-a-number",
        "slo-unknown-key",
        "slo-negative",
        "concurrency-zero",
        "concurrency-garbage",
        "concurrency-descending",
    ],
)
def test_a_bad_capacity_option_is_one_line_exit_2_and_nothing_written(
    tmp_path: Path, args: tuple[str, ...], message: str
) -> None:
    code, out = _gate(tmp_path, "--slo", "e2el_ms=5000", *args)
    assert code == 2, out
    [line] = out.strip().splitlines()
    assert line.startswith(f"servegate: error: {message}"), line
    assert list(tmp_path.iterdir()) == []  # no database, no report


def test_a_bad_slo_in_the_config_file_names_its_key(tmp_path: Path) -> None:
    path = tmp_path / "gate.yaml"
    path.write_text(f"baseline: {{url: '{_closed_url()}'}}\ncandidate: {{url: '{_closed_url()}'}}\n"
                    "performance: {slo: 'ttft_ms=500,ttft_ms=600'}\n")  # fmt: skip
    result = CliRunner().invoke(gate, ["--config", str(path), "--no-store", "--quiet"])
    assert result.exit_code == 2, result.output
    assert f"{path}: performance.slo: Value error, SLO key ttft_ms given twice" in result.output


def test_good_capacity_options_get_as_far_as_the_endpoints(tmp_path: Path) -> None:
    code, out = _gate(tmp_path, "--slo", "ttft_ms=500 e2el_ms=5000",
                      "--capacity-concurrency", "1,2,4", "--capacity-requests", "8")  # fmt: skip
    assert code == 3, out  # valid: both endpoints are closed ports, so unreachable
    assert "unreachable" in out
