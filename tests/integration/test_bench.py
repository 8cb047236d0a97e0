"""`servegate bench` as a user runs it, against the lean SSE server of benchmarks/ on loopback.

The server's knobs (TTFT, ITL per token, two tokens per event, an empty role chunk first) and
its own ground truth (`GET /_truth`: perf_counter_ns when it read each request and wrote each
event, on the machine's one monotonic clock) say what the JSON must contain. Hard facts are
asserted exactly (counts, token splits, lower bounds no server can beat); closeness to the truth
is asserted within tolerances made of what the run measured about itself (its event-loop lag),
never a fixed wall-clock budget.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from statistics import median
from typing import Any

import pytest

# Latencies against the server's own truth: run alone (scripts/test.sh, the `timed` half).
pytestmark = pytest.mark.timed

ROOT = Path(__file__).resolve().parents[2]
TTFT_MS = 40.0
ITL_MS = 4.0
TOKENS_PER_EVENT = 2
OUTPUT_TOKENS = 24
INPUT_TOKENS = 32
REQUESTS = 16
SERVER_PROMPT_TOKENS = 8  # stream_server.py reports this for every request


@pytest.fixture(scope="module")
def stream_server() -> Iterator[str]:
    """benchmarks/stream_server.py on an OS-picked port; stopped by its own PID."""
    proc = subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "stream_server.py"),
            "--ttft-ms",
            str(TTFT_MS),
            "--itl-ms",
            str(ITL_MS),
            "--tokens-per-event",
            str(TOKENS_PER_EVENT),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline())
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        if proc.stdout is not None:
            proc.stdout.close()


def _truth(base: str) -> list[dict[str, Any]]:
    with urllib.request.urlopen(f"{base}/_truth", timeout=10) as response:
        records: list[dict[str, Any]] = json.loads(response.read())
    return records


def servegate(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "servegate", *args],
        capture_output=True,
        text=True,
        timeout=100,
        cwd=ROOT,
    )


@pytest.fixture(scope="module")
def sweep(stream_server: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One closed-loop sweep at concurrency 1 and 4, with the server's truth for it."""
    out = tmp_path_factory.mktemp("bench") / "bench.json"
    _truth(stream_server)  # forget anything earlier
    proc = servegate(
        "bench",
        "--endpoint",
        f"{stream_server}/v1",
        "--concurrency",
        "1,4",
        "--requests",
        str(REQUESTS),
        "--input-tokens",
        str(INPUT_TOKENS),
        "--output-tokens",
        str(OUTPUT_TOKENS),
        "--slo",
        f"ttft_ms={TTFT_MS - 1}",
        "--logprobs",  # each chunk then says how many tokens it carries
        "--metrics-interval-s",
        "0.05",
        "--json",
        str(out),
    )
    assert proc.returncode == 0, proc.stderr
    return {"result": json.loads(out.read_text()), "truth": _truth(stream_server), "proc": proc}


def test_the_sweep_is_recorded_so_it_can_be_repeated(sweep: dict[str, Any]) -> None:
    result = sweep["result"]
    assert (result["schema_version"], result["kind"]) == (3, "servegate.bench")
    assert result["model"] == "bench"
    assert result["workload"] == {
        "kind": "synthetic",
        "input_tokens": INPUT_TOKENS,
        "output_tokens": OUTPUT_TOKENS,
        "seed": 0,
        "temperature": 0.0,
        "logprobs": True,
    }
    assert [s["label"] for s in result["steps"]] == ["c=1", "c=4"]
    assert [s["arrival"]["concurrency"] for s in result["steps"]] == [1, 4]
    # every request the server saw: one warm-up per stream, then the measured ones
    assert len(sweep["truth"]) == (1 + REQUESTS) + (4 + REQUESTS)


def test_every_request_is_counted_and_tokens_are_split_per_chunk(sweep: dict[str, Any]) -> None:
    for step in sweep["result"]["steps"]:
        m = step["metrics"]
        c = step["arrival"]["concurrency"]
        assert (m["sent"], m["succeeded"], m["failed"]) == (REQUESTS, REQUESTS, 0)
        assert (step["warmup"], step["stopped_by"]) == (c, "requests")
        assert m["peak_concurrency"]["value"] == c
        assert m["output_token_sources"] == {"usage": REQUESTS}
        assert m["output_tokens"]["min"] == m["output_tokens"]["max"] == OUTPUT_TOKENS
        chunks = OUTPUT_TOKENS // TOKENS_PER_EVENT
        assert m["itl_chunk_ms"]["count"] == REQUESTS * (chunks - 1)
        assert m["itl_token_ms"]["count"] == REQUESTS * (chunks - 1) * TOKENS_PER_EVENT
        assert m["itl_token_unknown"] == 0
        assert m["ttft_ms"]["definition"].startswith("first chunk carrying a token")


def test_ttft_starts_at_the_first_token_not_the_empty_role_chunk(sweep: dict[str, Any]) -> None:
    # The role chunk goes out with the headers; no token can arrive before TTFT_MS.
    for step in sweep["result"]["steps"]:
        assert step["metrics"]["ttft_ms"]["min"] >= TTFT_MS
        assert step["metrics"]["slo_met"] == 0  # an SLO of TTFT_MS - 1 cannot be met
        assert step["metrics"]["goodput_rps"]["value"] == 0.0


def test_latencies_agree_with_the_servers_truth_within_the_clients_measured_lag(
    sweep: dict[str, Any],
) -> None:
    truth = sweep["truth"]
    server_ttft = [(t["event_ns"][0] - t["recv_ns"]) / 1e6 for t in truth]
    server_tpot = [
        (t["event_ns"][-1] - t["event_ns"][0]) / 1e6 / (OUTPUT_TOKENS - 1) for t in truth
    ]
    server_itl_token = [
        (b - a) / 1e6 / TOKENS_PER_EVENT
        for t in truth
        for a, b in zip(t["event_ns"], t["event_ns"][1:], strict=False)
    ]
    for step in sweep["result"]["steps"]:
        m, lag = step["metrics"], step["client"]
        late_ms = lag["loop_lag_max_ms"] + 5.0  # how late the client could have read a chunk
        assert m["ttft_ms"]["p50"] <= max(server_ttft) + late_ms
        assert abs(m["tpot_ms"]["p50"] - median(server_tpot)) <= 0.5 + 2 * late_ms / (
            OUTPUT_TOKENS - 1
        )
        assert abs(m["itl_token_ms"]["p50"] - median(server_itl_token)) <= 0.5 + late_ms / 2
        assert m["e2el_ms"]["min"] >= TTFT_MS + (OUTPUT_TOKENS / TOKENS_PER_EVENT - 1) * 0.9 * (
            ITL_MS * TOKENS_PER_EVENT
        )


def test_every_answer_is_checked_and_lengths_are_compared_with_usage(
    sweep: dict[str, Any],
) -> None:
    for step in sweep["result"]["steps"]:
        checks, lengths = step["correctness"], step["lengths"]
        # the server answers " tok tok tok …": a token loop, caught in every answer
        assert (checks["checked"], checks["degenerate"]) == (REQUESTS, REQUESTS)
        assert checks["finish_reasons"] == {"length": REQUESTS}
        assert lengths["prompt_deviation_tokens"] == SERVER_PROMPT_TOKENS - INPUT_TOKENS
        assert (lengths["output_short"], lengths["output_over"]) == (0, 0)
        client = step["client"]
        assert client["client_bound"] == bool(client["reasons"])


def test_the_servers_own_gauges_are_scraped_during_each_step(sweep: dict[str, Any]) -> None:
    # The server's /metrics counts its streams past and inside their TTFT under vLLM's names;
    # a closed loop of c streams can never have more than c at the server.
    for step, concurrency in zip(sweep["result"]["steps"], (1, 4), strict=True):
        server = step["server"]
        assert server["measured"], server
        gauges = {g["key"]: g for g in server["gauges"]}
        running, waiting = gauges["requests_running"], gauges["requests_waiting"]
        assert running["source"] == "vllm:num_requests_running"
        assert waiting["source"] == "vllm:num_requests_waiting"
        assert running["samples"] >= 3
        assert 1 <= running["max"] <= concurrency
        assert waiting["max"] <= concurrency
    assert "c=4: server requests_running mean" in sweep["proc"].stdout


def test_an_slo_no_step_met_has_no_capacity_and_says_so(sweep: dict[str, Any]) -> None:
    limit = sweep["result"]["max_under_slo"]
    assert (limit["setting"], limit["best"], limit["met"]) == ("concurrency", None, [])
    assert limit["missed"] == ["c=1", "c=4"]
    assert "max concurrency under SLO: none of the steps met it" in sweep["proc"].stdout


def test_the_table_shows_one_row_per_step_with_the_definitions(sweep: dict[str, Any]) -> None:
    out = sweep["proc"].stdout
    rows = [line for line in out.splitlines() if line.startswith(("│ c=1 ", "│ c=4 "))]
    assert len(rows) == 2
    assert "TTFT = first chunk carrying a token" in out
    assert "GuideLLM calls this ITL" in out
    assert "bench c=4: 16/16 requests" in sweep["proc"].stderr  # plain progress off a terminal


def test_a_timestamped_replay_keeps_its_schedule_and_bodies(
    stream_server: str, tmp_path: Path
) -> None:
    traffic = tmp_path / "traffic.jsonl"
    lines = [
        {
            "messages": [{"role": "user", "content": f"q{i}"}],
            "max_tokens": 4 + 2 * i,
            "timestamp": i,
        }
        for i in range(4)
    ]
    traffic.write_text("".join(json.dumps(line) + "\n" for line in lines))
    out = tmp_path / "replay.json"
    _truth(stream_server)
    proc = servegate(
        "bench",
        "--endpoint",
        f"{stream_server}/v1",
        "--workload",
        "replay",
        str(traffic),
        "--time-scale",
        "0.05",
        "--slo",
        "e2el_ms=60000",
        "--json",
        str(out),
        "-q",
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(out.read_text())
    (step,) = result["steps"]
    assert step["arrival"]["kind"] == "replay"
    assert result["workload"]["timestamps"] is True
    assert step["metrics"]["succeeded"] == 4
    assert step["metrics"]["slo_met"] == 4
    assert sorted(step["metrics"]["output_tokens"][k] for k in ("min", "max")) == [4, 10]
    # no logprobs asked: two tokens per chunk, usage disagrees with one per chunk
    assert step["metrics"]["itl_token_unknown"] == 4
    assert step["metrics"]["itl_token_ms"]["count"] == 0
    truth = _truth(stream_server)
    measured = truth[1:]  # after the one warm-up request
    # Timestamps 1 s apart, scaled by 0.05: request i is due 50 ms × i after the first. A
    # schedule is kept when no request is sent early; one sent late (a busy machine) only shifts
    # that request, so each is checked against its own due time, not the gap to the one before.
    offsets_ms = [(r["recv_ns"] - measured[0]["recv_ns"]) / 1e6 for r in measured]
    assert len(offsets_ms) == 4
    assert all(at >= 50.0 * i * 0.9 for i, at in enumerate(offsets_ms)), offsets_ms


@pytest.fixture
def closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["--concurrency", "0"], 2, "--concurrency: 0 is not a positive integer"),
        (["--slo", "ttft_ms=soon"], 2, "--slo: ttft_ms='soon'"),
        (["--workload", "mystery"], 2, "--workload: unknown 'mystery'"),
        (["--workload", "replay", "BROKEN"], 2, "BROKEN:2: not JSON"),
        ([], 3, "endpoint URL unreachable"),
    ],
    ids=["concurrency-0", "bad-slo", "unknown-workload", "broken-replay-line", "unreachable"],
)
def test_bad_input_is_one_line_with_its_exit_code_and_nothing_written(
    tmp_path: Path, closed_port_url: str, args: list[str], code: int, message: str
) -> None:
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"messages": []}\n{"messages": [\n')
    out = tmp_path / "out.json"
    args = [str(broken) if a == "BROKEN" else a for a in args]
    proc = servegate("bench", "--endpoint", closed_port_url, "--json", str(out), *args)
    assert proc.returncode == code
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    expected = message.replace("BROKEN", str(broken)).replace("URL", closed_port_url)
    assert expected in lines[0]
    assert not out.exists()
