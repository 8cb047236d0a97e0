"""A resumed run compares what a managed engine is, not how its start-up happened to go."""

from __future__ import annotations

from servegate.config.models import EndpointConfig, GateConfig
from servegate.orchestration.runner import run_fingerprints
from servegate.verdict.model import Fingerprint, LaunchRecord

CFG = GateConfig(
    baseline=EndpointConfig.model_validate({"launch": {"command": ["engine", "--port", "{port}"]}}),
    candidate=EndpointConfig(url="http://127.0.0.1:9/v1"),
    gates=("startup",),
)


def _fp(command: str, ready_s: float, pid: int) -> Fingerprint:
    launch = LaunchRecord(command=command, log_path=f"runs/{pid}/baseline.log", outcome="ready",
                          message="ready", pid=pid, load_s=ready_s / 2, ready_s=ready_s,
                          peak_rss_mb=300 + pid)  # fmt: skip
    return Fingerprint(url="http://127.0.0.1:1/v1", model="m", environment={"python.torch": "2"},
                       launch=launch)  # fmt: skip


def test_a_launch_differing_only_in_times_memory_and_pid_is_the_same_endpoint() -> None:
    first = run_fingerprints(CFG, {"baseline": _fp("engine --port '{port}'", 2.5, 100)})
    again = run_fingerprints(CFG, {"baseline": _fp("engine --port '{port}'", 3.1, 200)})
    assert first == again
    assert first["baseline.launch.command"] == "engine --port '{port}'"
    assert first["baseline.environment"] == {"python.torch": "2"}


def test_a_changed_launch_command_is_a_different_endpoint() -> None:
    first = run_fingerprints(CFG, {"baseline": _fp("engine --port '{port}'", 2.5, 100)})
    other = run_fingerprints(CFG, {"baseline": _fp("engine --fast --port '{port}'", 2.5, 100)})
    assert first != other
