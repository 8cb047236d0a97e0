"""The proxy package's public names are deliberate, and it stays at the runner's layer: nothing
below it (store, verdict, gates, endpoints, stats, config) imports it."""

from __future__ import annotations

import ast
from pathlib import Path

import servegate.proxy as proxy

SRC = Path(proxy.__file__).resolve().parents[1]


def test_all_lists_exactly_the_public_members() -> None:
    public = {name for name in vars(proxy) if not name.startswith("_")}
    modules = {name for name in public if type(getattr(proxy, name)).__name__ == "module"}
    assert set(proxy.__all__) == public - modules


def test_only_the_cli_imports_the_proxy() -> None:
    importers = []
    for path in SRC.rglob("*.py"):
        package = path.relative_to(SRC).parts[0]
        if package in ("proxy", "cli"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [a.name for a in node.names] if isinstance(node, ast.Import)
                else [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            )  # fmt: skip
            if any(n.startswith("servegate.proxy") for n in names):
                importers.append(str(path.relative_to(SRC)))
    assert importers == []
