"""The layering of DESIGN.md and the README, checked on every import (module level and inside
functions): a package imports only packages below it, the reference engine imports nothing of
servegate (an independent oracle), and no private name crosses a module."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "servegate"

# Lower rank = lower layer. Packages of one rank never import each other.
RANKS = {
    "config": 0,
    "stats": 1,
    "endpoints": 2,
    "verdict": 3,  # pure: the report model, the one judgement rule, the run-level decision
    "probes": 3,
    "load": 4,
    "managed": 4,
    "environment": 5,
    "gates": 6,
    "store": 7,
    "reports": 7,
    "canary": 8,
    "proxy": 9,
    "orchestration": 9,
    "cli": 10,
}
ANYONE = {"engine", "__init__"}  # the independent reference engine; the package's version


def _package(path: Path) -> str:
    rel = path.relative_to(SRC)
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


def _imports(path: Path) -> list[tuple[str, list[str], int]]:
    """(imported servegate module, names imported from it, line) for every import in a file."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "servegate" or node.module.startswith("servegate."):
                out.append((node.module, [a.name for a in node.names], node.lineno))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("servegate."):
                    out.append((alias.name, [], node.lineno))
    return out


def _target(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


FILES = sorted(p for p in SRC.rglob("*.py") if "migrations" not in p.parts)


def test_every_package_has_a_layer() -> None:
    packages = {_package(p) for p in FILES} - ANYONE - {"__main__", "py"}
    assert packages <= set(RANKS), packages - set(RANKS)


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(SRC)))
def test_imports_go_down_only(path: Path) -> None:
    source = _package(path)
    bad = []
    for module, names, line in _imports(path):
        target = _target(module)
        if source == "engine" and target != "engine":
            bad.append(f"line {line}: the engine imports {module}")
        elif target in ANYONE or target == source or source in ("__main__", "__init__"):
            pass
        elif RANKS.get(target, 99) >= RANKS.get(source, -1):
            bad.append(f"line {line}: {source} imports {module} (not below it)")
        bad += [f"line {line}: private name {n} from {module}" for n in names if n.startswith("_")
                and n != "__version__"]  # fmt: skip
    assert not bad, bad


@pytest.mark.parametrize("path", sorted((SRC / "gates").rglob("*.py")), ids=lambda p: p.name)
def test_gates_see_the_endpoint_protocol_never_the_http_client(path: Path) -> None:
    assert not [m for m, _, _ in _imports(path) if m == "servegate.endpoints.http"]
