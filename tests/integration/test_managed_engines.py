"""Managed engines: servegate launches the real llama.cpp reference server from a config file,
measures its start-up, scans its log and records both environments."""

from __future__ import annotations

import importlib.metadata
import json
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.integration.conftest import require_engine, run_servegate

pytestmark = [pytest.mark.engine, pytest.mark.slow]


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2] != "Z"


def _llama(
    *extra: str, python: tuple[str, ...] = ("-m", "servegate.engine.llama_server")
) -> list[str]:
    """The reference engine's own server command line, its port left to servegate."""
    from servegate.engine.launch import llama_command
    from servegate.engine.model import shipped_model_path

    argv = llama_command(shipped_model_path(), 1, tuple(extra))
    argv[argv.index("--port") + 1] = "{port}"
    return [sys.executable, *python, *argv[3:]]


def _gate(tmp_path: Path, config: dict[str, Any], *extra: str) -> tuple[int, str, dict[str, Any]]:
    require_engine()
    path = tmp_path / "gate.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    out, md = tmp_path / "report.json", tmp_path / "report.md"
    proc = run_servegate(
        "gate", "--config", str(path), "--json", str(out), "--markdown", str(md),
        "--db", str(tmp_path / "runs.db"), "--run-dir", str(tmp_path / "runs"), *extra,
    )  # fmt: skip
    assert "Traceback" not in proc.stderr, proc.stderr
    assert out.exists(), f"exit {proc.returncode}: {proc.stderr[-2000:]}"
    return proc.returncode, proc.stdout + md.read_text(), json.loads(out.read_text())


@pytest.mark.timeout(300)  # two engine start-ups on a shared 2-core machine
def test_a_managed_baseline_and_candidate_report_load_times_and_what_changed(
    tmp_path: Path,
) -> None:
    config = {
        "baseline": {"launch": {"command": _llama()}, "matrix": {"mmap": "on"}},
        "candidate": {"launch": {"command": _llama("--use_mmap", "false")},
                      "matrix": {"mmap": "off"}},
        "gates": ["startup"],
    }  # fmt: skip
    code, text, report = _gate(tmp_path, config)
    assert (code, report["verdict"]) == (0, "pass"), report["reason"]
    for side in ("baseline", "candidate"):
        launch = report[side]["launch"]
        print(side, {k: launch[k] for k in ("load_s", "ready_s", "peak_rss_mb", "gpu_note")})
        assert launch["outcome"] == "ready"
        assert 0 < launch["load_s"] <= launch["ready_s"] < 120
        assert launch["peak_rss_mb"] > 50  # a 135M-parameter model and its server
        assert launch["gpu_memory_mb"] is None  # a CPU engine: said, never 0
        assert launch["gpu_note"].startswith("not measured: nvidia-smi ")
        assert not _alive(launch["pid"])
        assert Path(launch["log_path"]).parent.parent == tmp_path / "runs"
        env = report[side]["environment"]
        assert env["python.llama-cpp-python"] == importlib.metadata.version("llama-cpp-python")
        assert env["server.not_served"] == "/version, /props, /metrics"
    startup = report["gates"][0]
    assert (
        startup["metrics"]["candidate_launch_ready_s"] == report["candidate"]["launch"]["ready_s"]
    )
    # The real engine's own fallback line, printed by both sides: a finding, not a regression.
    fallback = [f for f in startup["findings"] if f["probe"] == "log:llama.cpp-buffer-fallback"]
    assert [(f["category"], f["severity"]) for f in fallback] == [("fallback", "info")]
    assert "using CPU instead" in fallback[0]["candidate_excerpt"]
    assert "| matrix.mmap | on | off |" in text
    assert "launch.command" in text
    assert text.index("### What changed") < text.index("### Gates")
    assert "What changed" in text.split("Gates")[0]  # the terminal shows it above the gates too


@pytest.mark.timeout(300)
def test_a_candidate_that_imports_a_missing_optional_module_fails_gate_1(tmp_path: Path) -> None:
    blocked = (
        "-c",
        "import sg_missing_ffmpeg_binding; import runpy; "
        "runpy.run_module('servegate.engine.llama_server', run_name='__main__')",
    )
    config = {
        "baseline": {"launch": {"command": _llama()}},
        "candidate": {"launch": {"command": _llama(python=blocked)}},
        "gates": ["startup", "numerics"],
    }
    code, _, report = _gate(tmp_path, config)
    assert (code, report["verdict"]) == (1, "fail")
    startup = report["gates"][0]
    assert startup["status"] == "fail"
    [start] = [f for f in startup["findings"] if f["probe"] == "launch"]
    assert start["category"] == "optional-dependency"
    assert "module 'sg_missing_ffmpeg_binding'" in start["message"]
    assert "No module named 'sg_missing_ffmpeg_binding'" in start["candidate_excerpt"]
    assert report["gates"][1]["status"] == "skip"
    assert report["baseline"]["launch"]["outcome"] == "ready"
    assert not _alive(report["baseline"]["launch"]["pid"])
    assert not _alive(report["candidate"]["launch"]["pid"])
