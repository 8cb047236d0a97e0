"""The extras servegate names in its messages are the ones pyproject.toml declares, and the core
install requires none of their packages (a `pip install servegate` builds no llama.cpp)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from servegate.config.extras import EXTRAS
from servegate.engine.launch import ENGINE_INSTALL_HINT

PYPROJECT = tomllib.loads(
    (Path(__file__).resolve().parents[3] / "pyproject.toml").read_text(encoding="utf-8")
)
OPTIONAL = PYPROJECT["project"]["optional-dependencies"]
# distribution name -> the module servegate imports from it
DISTRIBUTIONS = {
    "starlette": "starlette",
    "uvicorn": "uvicorn",
    "prometheus-client": "prometheus_client",
    "psycopg[binary]": "psycopg",
    "llama-cpp-python[server]": "llama_cpp",
}


def _name(requirement: str) -> str:
    return requirement.split(";")[0].split(">")[0].split("<")[0].split("=")[0].strip()


@pytest.mark.parametrize("extra", sorted(EXTRAS))
def test_each_extra_named_in_a_message_is_declared_with_the_modules_it_provides(
    extra: str,
) -> None:
    provided = {DISTRIBUTIONS.get(_name(r), _name(r)) for r in OPTIONAL[extra]}
    assert set(EXTRAS[extra]) <= provided


def test_the_core_install_requires_nothing_of_an_extra() -> None:
    core = {_name(r) for r in PYPROJECT["project"]["dependencies"]}
    in_extras = {_name(r) for e in ("engine", "proxy", "postgres") for r in OPTIONAL[e]}
    assert core & in_extras == set()
    assert "uvloop" not in core  # the proxy's loop


def test_the_engine_hint_names_the_engine_extra_and_the_toolchain() -> None:
    assert "pip install 'servegate[engine]'" in ENGINE_INSTALL_HINT
    assert "llama-cpp-python" in OPTIONAL["engine"][0]
    assert "C++ compiler" in ENGINE_INSTALL_HINT
