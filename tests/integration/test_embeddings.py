"""The embeddings gate and `bench --api embeddings` against the real reference engine in
embeddings mode, on loopback.

Two embeddings-mode engines (the same shipped model, two processes) are clean vs clean; the
embed-perturb fault layer in front of the second one turns every vector by 1 − cos = 5.0e-3
(measured: 0.995037 for every input), five times the default tolerance of 1e-3 over an A/A floor
of exactly 0 (the engine returns bit-identical vectors for the same request).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from tests.integration.conftest import GateRun, fault_in_front, require_engine, run_servegate

from servegate.config.models import EndpointConfig, GateConfig, Policy
from servegate.endpoints.http import OpenAIEndpoint
from servegate.gates import embeddings
from servegate.gates.embeddings import shipped_inputs
from servegate.gates.pair import EndpointPair
from servegate.verdict.model import Status
from servegate.verdict.rules import decide

if TYPE_CHECKING:
    from servegate.engine import RunningEngine

# Each embeddings request is about 90 tokens of prefill per side: seconds on an idle 2-core
# machine, up to a minute when the machine is shared (measured 3-53 s at load average 9).
pytestmark = [pytest.mark.engine, pytest.mark.timeout(400)]
DEADLINE = ("--deadline-s", "180")


@pytest.fixture(scope="module")
def embedding_engines() -> Iterator[tuple[RunningEngine, RunningEngine]]:
    """Two clean embeddings-mode engines."""
    require_engine()
    from servegate.engine import start_engine

    with start_engine(embeddings=True) as first, start_engine(embeddings=True) as second:
        yield first, second


@pytest.fixture(scope="module")
def perturbed_url(
    embedding_engines: tuple[RunningEngine, RunningEngine], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """embed-perturb in front of the second clean engine, started as `servegate engine serve
    --fault` starts it, and stopped by its own process id."""
    log = tmp_path_factory.mktemp("proxy") / "proxy.log"
    with fault_in_front(["embed-perturb"], embedding_engines[1].base_url, log) as url:
        yield url


def embeddings_gate(
    gate_cli: Callable[..., GateRun], baseline: RunningEngine, candidate_url: str
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    class Candidate:
        base_url = candidate_url

    proc, report = gate_cli(baseline, Candidate, "--gates", "embeddings", *DEADLINE)
    [gate] = [g for g in report["gates"] if g["name"] == "embeddings"]
    return proc, gate


def test_clean_against_clean_passes_with_an_exactly_zero_distance(
    gate_cli: Callable[..., GateRun], embedding_engines: tuple[RunningEngine, RunningEngine]
) -> None:
    baseline, candidate = embedding_engines
    proc, gate = embeddings_gate(gate_cli, baseline, candidate.base_url)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert gate["status"] == "pass", gate["summary"]
    assert gate["metrics"]["embedding_inputs"] == len(shipped_inputs())
    assert gate["metrics"]["embedding_dimension"] == 576
    assert gate["metrics"]["embedding_max_cosine_distance"] == 0.0
    assert gate["metrics"]["embedding_floor_max_cosine_distance"] == 0.0
    # llama-cpp-python serves neither /score nor /rerank: not applicable, listed, never passed.
    assert gate["not_measured"] == []
    assert [n.split(":")[0] for n in gate["not_applicable"]] == [
        "/score score deviation, per pair",
        "/rerank score deviation, per pair",
    ]


def test_perturbed_vectors_fail_with_a_finding_naming_each_input(
    gate_cli: Callable[..., GateRun],
    embedding_engines: tuple[RunningEngine, RunningEngine],
    perturbed_url: str,
    tmp_path: Path,
) -> None:
    proc, gate = embeddings_gate(gate_cli, embedding_engines[0], perturbed_url)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert gate["status"] == "fail"
    assert gate["metrics"]["embedding_inputs_beyond_noise"] == len(shipped_inputs())
    assert gate["metrics"]["embedding_min_cosine"] == pytest.approx(0.995037, abs=1e-6)
    probes = [f["probe"] for f in gate["findings"]]
    assert probes == [f"embeddings:{i.id}" for i in shipped_inputs()]
    assert all(
        f["curl"].startswith(f"curl -sS {perturbed_url}/embeddings") for f in gate["findings"]
    )


async def test_the_generative_engine_skips_the_gate_saying_why(clean_engine: RunningEngine) -> None:
    # Its /v1/embeddings fails any request with several inputs (HTTP 500, n_seq_max 1) and answers
    # a single input with per-token vectors (pooling none): nothing to compare against.
    async with OpenAIEndpoint("baseline", clean_engine.base_url) as ep:
        pair = EndpointPair(ep, ep, model=clean_engine.model)
        cfg = GateConfig(baseline=EndpointConfig(url=clean_engine.base_url),
                         candidate=EndpointConfig(url="http://127.0.0.1:1/v1"))  # fmt: skip
        evidence = await embeddings.collect(pair, cfg)
    result = embeddings.evaluate(evidence, Policy())
    assert evidence.candidate is None  # not asked once the baseline served none
    assert result.status is Status.SKIP
    assert "the baseline serves none" in result.summary
    assert "HTTP 500: llama_decode returned -1" in result.summary
    assert decide([result]).exit_code == 3  # nothing measured: inconclusive, never a pass


def test_bench_measures_embeddings_latency_and_throughput(
    embedding_engines: tuple[RunningEngine, RunningEngine], tmp_path: Path
) -> None:
    out = tmp_path / "bench.json"
    proc = run_servegate(
        "bench", "--endpoint", embedding_engines[0].base_url, "--api", "embeddings",
        "--concurrency", "1,2", "--requests", "4", "--input-tokens", "16",
        "--inputs-per-request", "2", "--json", str(out), "--quiet",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    result = json.loads(out.read_text())
    assert result["kind"] == "servegate.bench.embeddings"
    assert [s["label"] for s in result["steps"]] == ["c=1", "c=2"]
    for step in result["steps"]:
        m = step["metrics"]
        assert (m["sent"], m["succeeded"]) == (4, 4)
        assert m["dimensions"] == {"576": 4}
        assert m["latency_ms"]["count"] == 4
        assert m["latency_ms"]["p50"] > 0
        assert m["inputs_per_s"]["value"] == pytest.approx(2 * m["requests_per_s"]["value"])
        assert m["prompt_tokens"]["min"] > 0
