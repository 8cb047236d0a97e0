"""The golden gate against the stream-utf8 fault, on the real reference engine.

The fault layer runs in front of the session's clean engine itself (`python -m
servegate.engine.faults`), so the baseline and the candidate are one llama.cpp server reached
under two names: the gate serves the sides one after the other (`sides_at_once: false`).

Measured (2026-12-02, SmolLM2-135M, default golden suite): three probes answer in CJK, plain and
streamed alike — multilingual-zh-answer "空氣是什么颜色？", multilingual-zh-translate, and
multilingual-ja-answer; streamed through the fault they become runs of 24, 39 and 60 U+FFFD.
(multilingual-fr-answer answers in ASCII: the model writes `l&#39;Italie`.) The whole suite: FAIL
on degeneration (3 critical), stream_mismatch (3 of 35 probes against the baseline's 0) and
regressions (3 stream_parity); clean against clean through the passthrough fault: PASS.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from tests.integration.conftest import fault_in_front

if TYPE_CHECKING:
    from servegate.engine import RunningEngine

pytestmark = pytest.mark.engine

GateCli = Callable[..., tuple[Any, dict[str, Any]]]
ONE_SERVER = "sides_at_once: false\n"


class Url:
    """A candidate for `gate_cli`: only its base URL."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url


def golden(gate_cli: GateCli, baseline: RunningEngine, candidate: Url, tmp_path: Path) -> Any:
    config = tmp_path / "one-server.yaml"
    config.write_text(ONE_SERVER)
    return gate_cli(
        baseline, candidate, "--config", str(config), "--gates", "golden",
        "--category", "multilingual",
    )  # fmt: skip


def blocking(gate: dict[str, Any]) -> list[dict[str, Any]]:
    return [f for f in gate["findings"] if f["severity"] in ("critical", "major")]


def test_streamed_replacement_characters_fail_golden_as_degeneration_and_stream_mismatch(
    gate_cli: GateCli, clean_engine: RunningEngine, tmp_path: Path
) -> None:
    with fault_in_front(["stream-utf8"], clean_engine.base_url, tmp_path / "proxy.log") as url:
        candidate = Url(url)
        proc, report = golden(gate_cli, clean_engine, candidate, tmp_path)
    assert proc.returncode == 1, report
    [gate] = [g for g in report["gates"] if g["name"] == "golden"]
    assert gate["status"] == "fail"
    checks = {c["name"]: c["outcome"] for c in gate["checks"]}
    assert (checks["degeneration"], checks["stream_mismatch"]) == ("fail", "fail")
    degenerate = [f for f in blocking(gate) if f["category"] == "degeneration"]
    assert degenerate, gate["findings"]
    for finding in degenerate:
        assert finding["probe"].endswith(":stream")  # the streamed answer, never the plain one
        assert finding["severity"] == "critical"
        assert "U+FFFD repeated" in finding["message"]
    # Every blocking finding is about a streamed answer; the plain answers are the engine's own.
    assert {f["category"] for f in blocking(gate)} == {"degeneration", "stream_parity"}
    assert all(f["probe"].endswith(":stream") for f in blocking(gate))
    assert gate["metrics"]["exact_match_rate"] == 1.0
    assert gate["metrics"]["stream_mismatch_baseline"] == 0
    assert gate["metrics"]["stream_mismatch_candidate"] == len(degenerate)


def test_clean_through_the_fault_layer_passes_the_same_probes(
    gate_cli: GateCli, clean_engine: RunningEngine, tmp_path: Path
) -> None:
    with fault_in_front(["passthrough"], clean_engine.base_url, tmp_path / "proxy.log") as url:
        candidate = Url(url)
        proc, report = golden(gate_cli, clean_engine, candidate, tmp_path)
    assert proc.returncode == 0, report
    [gate] = [g for g in report["gates"] if g["name"] == "golden"]
    assert blocking(gate) == []
    checks = {c["name"]: c["outcome"] for c in gate["checks"]}
    assert (checks["degeneration"], checks["stream_mismatch"]) == ("pass", "pass")
