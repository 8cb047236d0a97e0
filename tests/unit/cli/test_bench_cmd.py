"""`servegate bench` refuses bad input with one line and exit 2 before sending anything."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
from click.testing import CliRunner

from servegate.cli.bench_cmd import bench_command

GOOD_LINE = json.dumps({"messages": [{"role": "user", "content": "hi"}]})


@pytest.fixture
def closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--concurrency", "0"], "--concurrency: 0 is not a positive integer"),
        (["--concurrency", "1,,4"], "--concurrency: '' is not an integer"),
        (["--rate", "-1"], "--rate: -1 must be a positive"),
        (["--rate", "2", "--concurrency", "4"], "choose --concurrency (closed loop) or --rate"),
        (["--arrival", "gamma"], "--arrival needs --rate"),
        (["--rate", "2", "--arrival", "uniform"], "--arrival: unknown 'uniform'"),
        (["--rate", "2", "--burstiness", "0.5"], "--burstiness needs --arrival gamma"),
        (["--slo", "ttft_ms=fast"], "--slo: ttft_ms='fast': not a number"),
        (["--slo", "latency=5"], "--slo: unknown SLO key 'latency'"),
        (["--workload", "random"], "--workload: unknown 'random'"),
        (["--workload", "replay"], "--workload replay needs a FILE"),
        (["--requests", "0"], "--requests: 0 must be >= 1"),
        (["--duration-s", "0"], "--duration-s: 0 must be > 0"),
        (["--warmup", "-1"], "--warmup: -1 must be >= 0"),
        (["--time-scale", "2"], "--time-scale applies to --workload replay only"),
        (["--ramp", "1-8"], "--ramp: '1-8' is not FROM:TO requests/s"),
        (["--ramp", "0:8"], "--ramp: 0 must be a positive"),
        (["--ramp", "1:8", "--rate", "2"], "--ramp is its own open loop"),
        (["--slo-attainment", "1.5"], "--slo-attainment: 1.5 must be in (0, 1]"),
        (["--metrics-path", "http://elsewhere/metrics"], "--metrics-path: 'http://elsewhere"),
        (["--metrics-interval-s", "0"], "--metrics-interval-s: 0 must be > 0"),
        (
            ["--api", "embeddings", "--workload", "golden"],
            "--api embeddings sends synthetic inputs; --workload golden does not apply",
        ),
        (
            ["--api", "embeddings", "--slo", "e2el_ms=100"],
            "--api embeddings sends synthetic inputs; --slo does not apply",
        ),
        (
            ["--api", "embeddings", "--workers", "2"],
            "--api embeddings sends synthetic inputs; --workers 2 does not apply",
        ),
    ],
    ids=[
        "concurrency-0",
        "concurrency-empty",
        "negative-rate",
        "rate-and-concurrency",
        "arrival-without-rate",
        "unknown-arrival",
        "burstiness-without-gamma",
        "slo-not-a-number",
        "slo-unknown-key",
        "unknown-workload",
        "replay-without-file",
        "no-requests",
        "no-duration",
        "negative-warmup",
        "time-scale-without-replay",
        "ramp-not-from-to",
        "ramp-from-zero",
        "ramp-and-rate",
        "attainment-above-1",
        "metrics-on-another-server",
        "metrics-interval-0",
        "embeddings-golden",
        "embeddings-slo",
        "embeddings-workers",
    ],
)
def test_bad_options_are_one_line_and_exit_2_with_nothing_written(
    tmp_path: Path, closed_port_url: str, args: list[str], message: str
) -> None:
    out = tmp_path / "out.json"
    result = CliRunner().invoke(
        bench_command, ["--endpoint", closed_port_url, "--json", str(out), *args]
    )
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(f"servegate: error: {message}")
    assert not out.exists()


def test_a_malformed_replay_line_names_the_file_and_line(
    tmp_path: Path, closed_port_url: str
) -> None:
    traffic = tmp_path / "traffic.jsonl"
    traffic.write_text(GOOD_LINE + "\n\n" + '{"messages": [}' + "\n")
    out = tmp_path / "out.json"
    result = CliRunner().invoke(
        bench_command,
        ["--endpoint", closed_port_url, "--workload", "replay", str(traffic), "--json", str(out)],
    )
    assert result.exit_code == 2
    assert result.stderr.startswith(f"servegate: error: {traffic}:3: not JSON")
    assert len(result.stderr.strip().splitlines()) == 1
    assert not out.exists()


def test_time_scale_needs_timestamps_in_the_replay(tmp_path: Path, closed_port_url: str) -> None:
    traffic = tmp_path / "traffic.jsonl"
    traffic.write_text(GOOD_LINE + "\n")
    result = CliRunner().invoke(
        bench_command,
        ["--endpoint", closed_port_url, "--workload", "replay", str(traffic), "--time-scale", "2"],
    )
    assert result.exit_code == 2
    assert "has no timestamps to scale" in result.stderr


def test_an_unreachable_endpoint_is_one_line_naming_it_and_exit_3(
    tmp_path: Path, closed_port_url: str
) -> None:
    out = tmp_path / "out.json"
    result = CliRunner().invoke(
        bench_command, ["--endpoint", closed_port_url, "--json", str(out), "-q"]
    )
    assert result.exit_code == 3
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(f"servegate: error: endpoint {closed_port_url} unreachable")
    assert not out.exists()


def test_a_missing_api_key_variable_is_a_usage_error(
    closed_port_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SERVEGATE_TEST_NO_SUCH_KEY", raising=False)
    result = CliRunner().invoke(
        bench_command,
        ["--endpoint", closed_port_url, "--api-key-env", "SERVEGATE_TEST_NO_SUCH_KEY"],
    )
    assert result.exit_code == 2
    assert "SERVEGATE_TEST_NO_SUCH_KEY is not set" in result.stderr


def test_bench_is_registered_in_the_command_group() -> None:
    from servegate.cli.main import _register, cli

    _register()
    assert cli.get_command(None, "bench") is bench_command  # type: ignore[arg-type]
