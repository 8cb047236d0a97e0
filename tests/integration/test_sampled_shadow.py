"""Sampled traffic through `servegate replay` and the shadow proxy, on the real reference engine:
the same engine on both sides passes, and a candidate that serves sampled requests greedily (the
fault layer's `sampled-greedy`, vLLM #15241's class) fails on the distribution of its answers'
openings — where no single pair could show it, since two sampled answers differ anyway.

Twenty sampled requests of one prompt, eight tokens each (the openings need three words): a
greedy candidate opens them all alike where the baseline opened them in 10-16 ways
(benchmarks/RESULTS-replay-sampled.md has the larger traffic, the repeats and the p-values).
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from tests.integration.conftest import fault_in_front, run_servegate
from tests.integration.proxy_harness import RunningProxy, start_proxy

from servegate.engine import RunningEngine

pytestmark = [pytest.mark.engine, pytest.mark.slow, pytest.mark.timeout(300)]

REPEATS = 20
REQUEST: dict[str, Any] = {
    "messages": [{"role": "user", "content": "Name a city in Europe, then say why."}],
    "temperature": 0.8, "top_p": 0.95, "max_tokens": 8,
}  # fmt: skip


@pytest.fixture(scope="module")
def greedy_candidate(
    clean_engine: RunningEngine, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    log = tmp_path_factory.mktemp("sampled-greedy") / "fault.log"
    with fault_in_front(["sampled-greedy"], clean_engine.base_url, log) as url:
        yield url


@pytest.fixture
def traffic(tmp_path: Path) -> Path:
    path = tmp_path / "traffic.jsonl"
    path.write_text("".join(json.dumps({**REQUEST, "seed": i}) + "\n" for i in range(REPEATS)))
    return path


def _replay(traffic: Path, baseline: str, candidate: str, out: Path) -> dict[str, Any]:
    proc = run_servegate("replay", str(traffic), "--baseline", baseline, "--candidate", candidate,
                         "--json", str(out))  # fmt: skip
    data: dict[str, Any] = json.loads(out.read_text())
    data["exit_code"], data["stdout"] = proc.returncode, proc.stdout
    return data


def _checks(checks: list[dict[str, Any]]) -> dict[str, str]:
    return {c["name"]: c["outcome"] for c in checks if c["name"].startswith("sampled_")}


def test_sampled_traffic_replayed_against_the_same_engine_passes_as_distributions(
    clean_engine: RunningEngine, traffic: Path, tmp_path: Path
) -> None:
    data = _replay(traffic, clean_engine.base_url,
                   clean_engine.base_url.replace("127.0.0.1", "localhost"),
                   tmp_path / "replay.json")  # fmt: skip
    summary = data["summary"]
    assert data["exit_code"] == 0, data["stdout"]
    assert (summary["pairs"], summary["greedy_pairs"], summary["sampled_pairs"]) == (20, 0, 20)
    # measured (pass), not skipped: the openings test ran on the repeated request
    assert _checks(summary["checks"])["sampled_openings"] == "pass"
    assert "sampled pairs: 20, judged as distributions" in data["stdout"]


def test_a_candidate_serving_sampled_requests_greedily_fails_replay_on_its_openings(
    clean_engine: RunningEngine, greedy_candidate: str, traffic: Path, tmp_path: Path
) -> None:
    data = _replay(traffic, clean_engine.base_url, greedy_candidate, tmp_path / "replay.json")
    summary = data["summary"]
    assert data["exit_code"] == 1, data["stdout"]
    assert summary["verdict"] == "fail"
    assert _checks(summary["checks"])["sampled_openings"] == "fail"
    # every pair differs, as sampled pairs do on a healthy server too: no pair alone is the proof
    assert summary["candidate_degenerate"] == 0
    assert any("open differently on the candidate" in r for r in summary["reasons"])


def _sampled(proxy: RunningProxy) -> dict[str, Any]:
    with urllib.request.urlopen(proxy.url + "/servegate/sampled", timeout=30) as response:
        value: dict[str, Any] = json.loads(response.read())
        return value


def test_the_shadow_proxy_judges_its_sampled_pairs_and_names_the_greedy_candidate(
    clean_engine: RunningEngine, greedy_candidate: str, tmp_path: Path
) -> None:
    with start_proxy("--primary", clean_engine.base_url, "--candidate", greedy_candidate,
                     "--sample", "1", "--db", str(tmp_path / "proxy.db")) as proxy:  # fmt: skip
        before = _sampled(proxy)
        assert (before["status"], before["pairs"]) == ("inconclusive", 0)
        client = openai.OpenAI(base_url=proxy.base_url, api_key="k", max_retries=0, timeout=60)
        for seed in range(REPEATS):
            client.chat.completions.create(model="m", seed=seed, **REQUEST)
        proxy.wait_idle()
        judged = _sampled(proxy)
    assert judged["pairs"] == REPEATS
    assert judged["status"] == "fail"
    assert _checks(judged["checks"])["sampled_openings"] == "fail"
