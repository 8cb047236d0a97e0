"""The performance gate as a user runs it, between two lean SSE servers of benchmarks/ on loopback.

`benchmarks/stream_server.py` has exact timing knobs, so the truth is known: a server whose TTFT
is 50 % longer must fail on TTFT P95 with its ratio and interval, and two servers with
the same knobs must pass (no false alarm on a shared 2-core machine: blocks are interleaved).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

# The gate judges two servers' latencies: run alone (scripts/test.sh, the `timed` half).
pytestmark = pytest.mark.timed

ROOT = Path(__file__).resolve().parents[2]
TTFT_MS = 40.0
ITL_MS = 1.0

Server = Callable[[float], str]


@pytest.fixture
def stream_server() -> Iterator[Server]:
    """Start benchmarks/stream_server.py with a TTFT; every one started is stopped by its PID."""
    procs: list[subprocess.Popen[str]] = []

    def start(ttft_ms: float) -> str:
        proc = subprocess.Popen(
            [sys.executable, str(ROOT / "benchmarks" / "stream_server.py"),
             "--ttft-ms", str(ttft_ms), "--itl-ms", str(ITL_MS)],
            stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        procs.append(proc)
        assert proc.stdout is not None
        return f"http://127.0.0.1:{int(proc.stdout.readline())}/v1"

    try:
        yield start
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(timeout=10)
            if proc.stdout is not None:
                proc.stdout.close()


def _gate(baseline: str, candidate: str, out: Path, *extra: str) -> tuple[int, dict[str, Any], str]:
    proc = subprocess.run(
        [sys.executable, "-m", "servegate", "gate", "--baseline", baseline,
         "--candidate", candidate, "--gates", "performance", "--no-store", "--json", str(out),
         *extra],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.returncode, json.loads(out.read_text()), proc.stdout


def _checks(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    [gate] = report["gates"]
    assert gate["name"] == "performance"
    return {c["name"]: c for c in gate["checks"]}


def test_a_server_with_half_again_the_ttft_fails_on_ttft_p95_with_its_interval(
    stream_server: Server, tmp_path: Path
) -> None:
    code, report, shown = _gate(
        stream_server(TTFT_MS), stream_server(TTFT_MS * 1.5), tmp_path / "r.json"
    )
    assert (code, report["verdict"], report["schema_version"]) == (1, "fail", 4)
    ttft = _checks(report)["ttft_ms"]
    assert ttft["outcome"] == "fail"
    ratio = float(ttft["ratio"].rstrip("×"))
    low, high = (float(v) for v in ttft["interval"].split("×")[0].split("–"))
    assert 1.3 < low <= ratio <= high < 1.7
    row = next(r for r in report["performance"] if r["metric"] == "TTFT P95")
    assert (row["ratio"], row["interval"], row["status"]) == (
        ttft["ratio"], ttft["interval"], "fail",
    )  # fmt: skip
    assert row["definition"].startswith("first chunk carrying a token")
    # The terminal shows the same row and the definitions under the table.
    assert "Performance Report" in shown
    assert "TTFT P95" in shown
    assert ttft["ratio"] in shown


def test_two_servers_with_the_same_knobs_pass(stream_server: Server, tmp_path: Path) -> None:
    code, report, shown = _gate(stream_server(TTFT_MS), stream_server(TTFT_MS), tmp_path / "r.json")
    checks = _checks(report)
    assert code == 0, report["gates"][0]["summary"]
    for name in ("ttft_ms", "e2el_ms", "tpot_ms", "output_tokens_per_s", "error_rate"):
        assert checks[name]["outcome"] == "pass", (name, checks[name])
    # No replica: the report says the A/A floor of the timings is not measured.
    assert "A/A floor not measured (no --baseline-replica)" in checks["ttft_ms"]["limit"]
    # Both servers answer every prompt the same alone and under load.
    assert checks["agreement_under_load"]["outcome"] == "pass"
    assert checks["agreement_under_load"]["candidate"] == "0/8 differ"
    # Each server's own /metrics (its streams past and inside their TTFT, under vLLM's names)
    # was scraped during each of its 6 blocks: evidence beside the judged rows; a closed loop of
    # 4 streams never has more than 4 at the server.
    evidence = {r["metric"]: r for r in report["performance_evidence"]}
    for row in (evidence["server requests running"], evidence["server requests waiting"]):
        for side in ("baseline", "candidate"):
            cell = row[side]
            assert "(vllm:num_requests_" in cell, row
            assert 0 <= float(cell.split("max ")[1].split(" ")[0]) <= 4
            assert int(cell.split(", ")[-1].removesuffix(" scrapes)")) >= 6
    assert evidence["server kv cache usage"]["baseline"] == (
        "not measured: the server does not export it"
    )
    assert "Under load, not judged" in shown


def test_a_replica_runs_the_same_blocks_and_its_floor_is_shown_beside_each_limit(
    stream_server: Server, tmp_path: Path
) -> None:
    # Baseline and replica have the same knobs, so the floor is narrow and the slower candidate
    # still fails.
    baseline, replica = stream_server(TTFT_MS), stream_server(TTFT_MS)
    candidate = stream_server(TTFT_MS * 1.5)
    code, report, _ = _gate(baseline, candidate, tmp_path / "r.json", "--baseline-replica", replica)
    assert code == 1, report["gates"][0]["summary"]
    ttft = _checks(report)["ttft_ms"]
    assert ttft["outcome"] == "fail"
    assert "A/A floor: replica / baseline" in ttft["limit"]
    [gate] = report["gates"]
    floor = gate["details"]["aa_floor"]["ttft_ms"]
    assert 0.7 < floor["ratio"] < 1.3, floor
    replica_blocks = [b for b in gate["details"]["blocks"] if b["side"] == "replica"]
    # As many blocks as baseline and candidate: 6, or more when a look was undecided.
    looked = gate["details"]["sequential"]["looks"][-1]["blocks"]
    assert looked in (6, 8, 10, 12)
    assert [b["block"] for b in replica_blocks] == list(range(looked))
    assert all(b["sent"] == 8 for b in replica_blocks)
    row = next(r for r in report["performance"] if r["metric"] == "TTFT P95")
    assert "A/A floor: replica / baseline" in row["threshold"]
