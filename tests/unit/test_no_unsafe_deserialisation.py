"""FAULTS 51: no stored or received data is ever turned into code. A guard over servegate's own
source: no pickle (or marshal, shelve, dill, joblib …), no eval/exec, no YAML loader that builds
Python objects, no numpy/torch load that unpickles. Stored data is JSON (and YAML through
`yaml.safe_load`) only; a stored row holding a pickle is refused, never run."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "servegate"
UNSAFE_MODULES = frozenset(
    {"pickle", "cPickle", "_pickle", "marshal", "shelve", "dill", "cloudpickle", "joblib",
     "jsonpickle"}
)  # fmt: skip
UNSAFE_CALLS = frozenset({"eval", "exec"})
UNSAFE_ATTRIBUTES = {("yaml", "load"), ("yaml", "unsafe_load"), ("yaml", "full_load"),
                     ("yaml", "Loader"), ("yaml", "UnsafeLoader"), ("torch", "load")}  # fmt: skip


def _findings(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    out = []
    for node in ast.walk(tree):
        where = f"{path.name}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Import):
            out += [f"{where} import {a.name}" for a in node.names
                    if a.name.split(".")[0] in UNSAFE_MODULES]  # fmt: skip
        elif (
            isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in UNSAFE_MODULES
        ):
            out.append(f"{where} from {node.module} import …")
        elif isinstance(node, ast.Call):
            fn = node.func
            if isinstance(fn, ast.Name) and fn.id in UNSAFE_CALLS:
                out.append(f"{where} {fn.id}(…)")
            if isinstance(fn, ast.Attribute) and fn.attr == "load" and any(
                kw.arg == "allow_pickle" and not (isinstance(kw.value, ast.Constant)
                                                  and kw.value.value is False)
                for kw in node.keywords
            ):  # fmt: skip
                out.append(f"{where} load(allow_pickle=…)")
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and (node.value.id, node.attr) in UNSAFE_ATTRIBUTES
        ):
            out.append(f"{where} {node.value.id}.{node.attr}")
    return out


def test_no_module_of_servegate_unpickles_or_evaluates_data() -> None:
    sources = sorted(SRC.rglob("*.py"))
    assert len(sources) > 100  # the guard reads the real tree
    assert [f for path in sources for f in _findings(path)] == []


@pytest.mark.parametrize(
    "snippet",
    ["import pickle", "from marshal import loads", "eval(text)", "yaml.load(text)",
     "numpy.load(path, allow_pickle=True)", "exec(code)"],
)  # fmt: skip
def test_the_guard_sees_each_unsafe_form(tmp_path: Path, snippet: str) -> None:
    path = tmp_path / "probe.py"
    path.write_text(snippet + "\n")
    assert _findings(path) != []
