"""`servegate replay` against the real engines: an A/A replay passes, the mixed-dtype candidate
fails on degenerate output, a broken traffic file stops before anything is sent or written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servegate.engine import RunningEngine

from .conftest import run_servegate

pytestmark = [pytest.mark.engine]

REQUESTS = [
    {"messages": [{"role": "user", "content": "What is 2+2?"}], "temperature": 0,
     "max_tokens": 32},
    {"path": "/v1/chat/completions", "headers": {"authorization": "[REDACTED]"},
     "request": {"messages": [{"role": "user", "content": "Name a colour."}], "temperature": 0,
                 "max_tokens": 32, "stream": True}},
    {"prompt": "The capital of France is", "temperature": 0, "max_tokens": 24},
]  # fmt: skip


@pytest.fixture
def traffic(tmp_path: Path) -> Path:
    path = tmp_path / "traffic.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in REQUESTS))
    return path


def test_replaying_against_the_same_engine_passes_with_every_greedy_pair_equal(
    clean_engine: RunningEngine, traffic: Path, tmp_path: Path
) -> None:
    out = tmp_path / "replay.json"
    proc = run_servegate("replay", str(traffic), "--baseline", clean_engine.base_url,
                         "--candidate", clean_engine.base_url, "--json", str(out))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(out.read_text())["summary"]
    assert (summary["pairs"], summary["greedy_pairs"], summary["exact_matches"]) == (3, 3, 3)
    assert summary["verdict"] == "pass"


def test_replaying_against_the_mixed_dtype_candidate_fails_on_degenerate_output(
    clean_engine: RunningEngine, mixed_dtype_engine: RunningEngine, traffic: Path, tmp_path: Path
) -> None:
    out = tmp_path / "replay.json"
    candidate = mixed_dtype_engine.base_url
    proc = run_servegate("replay", str(traffic), "--baseline", clean_engine.base_url,
                         "--candidate", candidate, "--json", str(out))  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    data = json.loads(out.read_text())
    assert data["summary"]["verdict"] == "fail"
    assert data["summary"]["candidate_degenerate"] >= 1
    assert "candidate degenerate" in proc.stdout
    assert all(p["exact_match"] is False for p in data["pairs"])


def test_a_broken_traffic_line_is_named_and_nothing_is_sent_or_written(
    tmp_path: Path, traffic: Path
) -> None:
    traffic.write_text(traffic.read_text() + '{"messages": [\n')
    out = tmp_path / "replay.json"
    # unreachable upstreams: had anything been sent, the error would be another one
    proc = run_servegate("replay", str(traffic), "--baseline", "http://127.0.0.1:9/v1",
                         "--candidate", "http://127.0.0.1:9/x/v1", "--json", str(out))  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr.startswith(f"servegate: error: {traffic}:4: not JSON")
    assert proc.stderr.count("\n") == 1
    assert not out.exists()
