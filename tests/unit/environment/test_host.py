"""A managed engine's host: its Python's packages, its CPU."""

from __future__ import annotations

import importlib.metadata
import os
import sys
from pathlib import Path

from servegate.environment.host import cpu, interpreter, python_packages


def test_the_interpreter_of_a_python_command_is_itself() -> None:
    assert interpreter([sys.executable, "-m", "x"], dict(os.environ)) == sys.executable


def test_the_interpreter_of_a_console_script_is_read_from_its_shebang(tmp_path: Path) -> None:
    script = tmp_path / "my-engine"
    script.write_text(f"#!{sys.executable}\nprint('hi')\n")
    script.chmod(0o755)
    env = {**os.environ, "PATH": f"{tmp_path}{os.pathsep}{os.environ.get('PATH', '')}"}
    assert interpreter(["my-engine", "serve"], env) == sys.executable


def test_a_binary_or_missing_command_has_no_interpreter(tmp_path: Path) -> None:
    assert interpreter(["/bin/sh", "-c", "true"], dict(os.environ)) is None
    assert interpreter(["no-such-engine-xyz"], dict(os.environ)) is None


async def test_package_versions_come_from_the_engine_interpreter() -> None:
    found = await python_packages([sys.executable, "-m", "x"], dict(os.environ), None)
    assert found["python.numpy"] == importlib.metadata.version("numpy")
    assert found["python.python"] == sys.version.split()[0]
    assert "python.vllm" not in found  # not installed here: left out, never guessed


def test_cpu_model_is_read_from_cpuinfo(tmp_path: Path) -> None:
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nmodel name\t: AMD EPYC 9654\n")
    assert cpu(info)["cpu"] == "AMD EPYC 9654"
