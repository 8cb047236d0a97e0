"""Each engine fault is failed by the right gate with the right category (relative to clean)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from servegate.engine import RunningEngine

pytestmark = pytest.mark.engine

GateCli = Callable[..., tuple[Any, dict[str, Any]]]


def blocking(report: dict[str, Any], gate: str) -> set[str]:
    [g] = [g for g in report["gates"] if g["name"] == gate]
    return {f["category"] for f in g["findings"] if f["severity"] in ("critical", "major")}


@pytest.mark.parametrize(
    ("fault_fixture", "category"),
    [
        ("template_drift_engine", "usage"),
        ("json_truncated_engine", "json"),
        ("eos_ignored_engine", "eos"),
    ],
    ids=["template-drift", "json-truncated", "eos-ignored"],
)
def test_golden_gate_fails_the_fault_with_its_category(
    request: pytest.FixtureRequest,
    gate_cli: GateCli,
    clean_engine: RunningEngine,
    fault_fixture: str,
    category: str,
) -> None:
    candidate = request.getfixturevalue(fault_fixture)
    proc, report = gate_cli(clean_engine, candidate, "--gates", "golden", "--category", category)
    assert proc.returncode == 1, report
    assert category in blocking(report, "golden")


def test_clean_against_clean_raises_no_false_alarm_on_the_same_categories(
    gate_cli: GateCli, clean_engine: RunningEngine, benign_engine: RunningEngine
) -> None:
    proc, report = gate_cli(
        clean_engine,
        benign_engine,
        "--gates",
        "golden",
        *("--category", "usage", "--category", "json", "--category", "eos"),
    )
    assert proc.returncode == 0, report
    assert blocking(report, "golden") == set()
