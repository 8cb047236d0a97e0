"""`servegate bench --workers N` against the lean SSE server of benchmarks/ on loopback.

Each request of a replay file names itself in `user`, which the server records (`GET /_truth`),
so the test sees exactly which work items the worker processes sent between them: every one
once. A worker killed mid-step (what the OOM killer does) is reported by number, with what the
other worker measured kept. Behaviour only; no timing is asserted.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
STREAMS = 3  # split 2 + 1 over two workers
REQUESTS = 11  # split 6 + 5
LINES = STREAMS + REQUESTS  # one warm-up per stream, then the measured requests


def start_server(*knobs: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(ROOT / "benchmarks" / "stream_server.py"), *knobs],
        stdout=subprocess.PIPE,
        text=True,
    )


def stop(proc: subprocess.Popen[str]) -> None:
    proc.terminate()
    proc.wait(timeout=10)
    if proc.stdout is not None:
        proc.stdout.close()


@pytest.fixture(scope="module")
def stream_server() -> Iterator[str]:
    """benchmarks/stream_server.py on an OS-picked port; stopped by its own PID."""
    proc = start_server("--ttft-ms", "5", "--itl-ms", "1", "--tokens", "8")
    try:
        assert proc.stdout is not None
        yield f"http://127.0.0.1:{int(proc.stdout.readline())}"
    finally:
        stop(proc)


def truth(base: str) -> list[dict[str, Any]]:
    """The server's records since the last call (it forgets them once read)."""
    with urllib.request.urlopen(f"{base}/_truth", timeout=10) as response:
        records: list[dict[str, Any]] = json.loads(response.read())
    return records


def servegate(*args: str) -> list[str]:
    return [sys.executable, "-m", "servegate", *args]


def replay_file(path: Path, lines: int, tokens: int) -> Path:
    path.write_text(
        "".join(
            json.dumps(
                {
                    "messages": [{"role": "user", "content": f"line {i}"}],
                    "max_tokens": tokens,
                    "user": f"line-{i}",
                }
            )
            + "\n"
            for i in range(lines)
        )
    )
    return path


@pytest.fixture(scope="module")
def spread(stream_server: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One closed-loop step of 3 streams spread over 2 worker processes."""
    tmp = tmp_path_factory.mktemp("workers")
    traffic = replay_file(tmp / "traffic.jsonl", LINES, tokens=8)
    out = tmp / "bench.json"
    truth(stream_server)  # forget anything earlier
    proc = subprocess.run(
        servegate(
            "bench", str(traffic), "--workload", "replay", "--endpoint", f"{stream_server}/v1",
            "--concurrency", str(STREAMS), "--requests", str(REQUESTS), "--workers", "2",
            "--no-server-metrics", "--json", str(out),
        ),
        capture_output=True, text=True, timeout=100, cwd=ROOT,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return {"result": json.loads(out.read_text()), "truth": truth(stream_server), "proc": proc}


def test_the_workers_send_every_work_item_exactly_once_between_them(spread: dict[str, Any]) -> None:
    keys = sorted(r["key"] for r in spread["truth"])
    assert keys == sorted(f"line-{i}" for i in range(LINES))


def test_merged_counts_are_the_sum_of_the_workers_requests(spread: dict[str, Any]) -> None:
    result = spread["result"]
    assert (result["schema_version"], result["workers"]) == (3, 2)
    (step,) = result["steps"]
    m = step["metrics"]
    assert (m["sent"], m["succeeded"], m["failed"]) == (REQUESTS, REQUESTS, 0)
    assert (step["warmup"], step["stopped_by"], step["worker_failures"]) == (
        STREAMS,
        "requests",
        [],
    )
    # the peak is counted over both processes' requests, on the machine's one clock
    assert m["peak_concurrency"]["value"] == STREAMS
    assert m["output_tokens"]["count"] == REQUESTS
    assert step["correctness"]["checked"] == REQUESTS


def test_each_worker_measures_its_own_load_and_any_bound_one_binds_the_step(
    spread: dict[str, Any],
) -> None:
    client = spread["result"]["steps"][0]["client"]
    workers = client["workers"]
    assert [w["worker"] for w in workers] == [1, 2]
    assert client["cpu_s"] == pytest.approx(sum(w["cpu_s"] for w in workers))
    assert client["client_bound"] == any(w["client_bound"] for w in workers)
    assert client["reasons"] == [
        f"worker {w['worker']}: {reason}" for w in workers for reason in w["reasons"]
    ]
    assert "2 client processes" in spread["proc"].stdout


def _worker_pids(parent: int) -> list[int]:
    """The spawned worker processes of `parent` (multiprocessing's resource tracker excluded)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        ppid = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("PPid"))
        if ppid == parent and b"spawn_main" in cmdline:
            pids.append(int(entry.name))
    return sorted(pids)


def test_a_worker_killed_mid_step_is_reported_and_the_others_results_kept(
    tmp_path: Path,
) -> None:
    # slow streams (8 tokens, 60 ms apart) so that the step is still running when one worker dies
    server = start_server("--ttft-ms", "5", "--itl-ms", "60", "--tokens", "8")
    try:
        assert server.stdout is not None
        base = f"http://127.0.0.1:{int(server.stdout.readline())}"
        traffic = replay_file(tmp_path / "traffic.jsonl", 4 + 24, tokens=8)
        out = tmp_path / "bench.json"
        bench = subprocess.Popen(
            servegate(
                "bench", str(traffic), "--workload", "replay", "--endpoint", f"{base}/v1",
                "--concurrency", "4", "--requests", "24", "--workers", "2",
                "--no-server-metrics", "--json", str(out), "--quiet",
            ),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
        )  # fmt: skip
        try:
            seen, victim = 0, None
            deadline = time.monotonic() + 60
            while victim is None and time.monotonic() < deadline:
                seen += len(truth(base))
                pids = _worker_pids(bench.pid)
                if seen > 4 and len(pids) == 2:  # past the warm-up: the measured phase runs
                    victim = pids[1]
                    os.kill(victim, signal.SIGKILL)
                time.sleep(0.05)
            assert victim is not None, "the workers never started measuring"
            _, stderr = bench.communicate(timeout=90)
        finally:
            if bench.poll() is None:
                bench.kill()
                bench.wait()
    finally:
        stop(server)
    assert bench.returncode == 1
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert f"(pid {victim}) ended without a result" in lines[0]
    result = json.loads(out.read_text())
    (step,) = result["steps"]
    (failure,) = step["worker_failures"]
    killed = 1 if failure.startswith("worker 1 of 2") else 2
    assert failure.startswith(f"worker {killed} of 2 (pid {victim}) ended without a result")
    # what the other worker measured is kept, and only that: its 12 requests, its own load
    assert step["metrics"]["sent"] == 12
    assert [w["worker"] for w in step["client"]["workers"]] == [3 - killed]
