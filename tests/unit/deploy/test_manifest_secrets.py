"""No manifest puts a Secret's value on a command line: `$(VAR)` in args is expanded by
Kubernetes into the process's argv (readable in `ps`, /proc/PID/cmdline and crash dumps), so a
variable filled from a secretKeyRef is read by servegate from its environment instead."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

DEPLOY = Path(__file__).resolve().parents[3] / "deploy"


def _containers(doc: Any) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    if isinstance(doc, dict):
        if "image" in doc and ("args" in doc or "command" in doc or "env" in doc):
            found.append(doc)
        for value in doc.values():
            found += _containers(value)
    elif isinstance(doc, list):
        for value in doc:
            found += _containers(value)
    return found


CONTAINERS = [
    (f"{path.relative_to(DEPLOY)}:{c.get('name')}", c)
    for path in sorted(DEPLOY.rglob("*.yaml"))
    for doc in yaml.safe_load_all(path.read_text(encoding="utf-8"))
    for c in _containers(doc)
]


@pytest.mark.parametrize(("where", "container"), CONTAINERS, ids=[w for w, _ in CONTAINERS])
def test_no_secret_reaches_a_command_line(where: str, container: dict[str, Any]) -> None:
    secret_vars = {
        e["name"] for e in container.get("env", []) if "secretKeyRef" in e.get("valueFrom", {})
    }
    argv = [*container.get("command", []), *container.get("args", [])]
    expanded = {v for a in argv for v in re.findall(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", str(a))}
    assert expanded & secret_vars == set(), where


def test_the_manifests_hold_containers() -> None:
    assert len(CONTAINERS) >= 2
