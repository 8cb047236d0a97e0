"""The CI recipes under examples/ would run as written: valid YAML; every `servegate …` command
line parsed by the real command (a renamed option fails here); every action a known release
given only inputs it declares; every variable or secret documented in the file's header; every
file, folder and executable resolved (in the repository, or made by an earlier step); every
`vllm serve` of the GPU gate file from a venv an earlier step installs with that very version."""

from __future__ import annotations

import itertools
import re
import shlex
from pathlib import Path
from typing import Any

import click
import pytest
import yaml

from servegate.cli.main import _register, cli

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
WORKFLOWS = sorted(EXAMPLES.glob("github-actions/*.yml"))
EXPRESSION = re.compile(r"\$\{\{\s*([^}]*?)\s*\}\}")  # a GitHub expression, filled in by the runner
CONTEXT_NAME = re.compile(r"\b(vars|secrets)\.([A-Z_][A-Z0-9_]*)")

# The actions the recipes use, at the major release named, and the inputs each declares in its
# action.yml (actions/checkout v4, actions/setup-python v5, actions/upload-artifact v4,
# mikepenz/action-junit-report v4): an input not declared there is ignored with a warning.
ACTIONS = {
    "actions/checkout@v4": {"repository", "ref", "path", "clean", "fetch-depth", "token"},
    "actions/setup-python@v5": {"python-version", "cache", "architecture"},
    "actions/upload-artifact@v4": {"name", "path", "if-no-files-found", "retention-days"},
    "mikepenz/action-junit-report@v4": {"report_paths", "check_name", "fail_on_failure"},
}
# Commands a runner has (ubuntu-latest; a self-hosted Linux runner with Python 3.11+), and
# shell words that are not commands.
RUNNER_COMMANDS = {"python", "python3", "pip", "mkdir", "cat", "echo", "exit"}
SHELL_WORDS = {"for", "do", "done", "if", "[", "then", "fi"}
# `vllm serve` options the GPU gate file may use: checked against vLLM 0.32.0's EngineArgs
# (vllm/engine/arg_utils.py: served_model_name, gpu_memory_utilization, max_model_len,
# tensor_parallel_size, seed, dtype) and its OpenAI frontend (host, port), 2026-12-03.
VLLM_SERVE_OPTIONS = {
    "--served-model-name", "--host", "--port", "--gpu-memory-utilization", "--max-model-len",
    "--tensor-parallel-size", "--seed", "--dtype",
}  # fmt: skip


def _steps(workflow: dict[Any, Any]) -> list[dict[str, Any]]:
    return [step for job in workflow["jobs"].values() for step in job["steps"]]


def _filled(text: str) -> str:
    """The script as the runner hands it to bash: URL variables filled with a URL, others with
    a plain word."""

    def fill(match: re.Match[str]) -> str:
        return "http://127.0.0.1:8000/v1" if match.group(1).endswith("_URL") else "value"

    return EXPRESSION.sub(fill, text)


def _commands(step: dict[str, Any]) -> list[list[str]]:
    """The step's shell commands as words: continuation lines joined, comments dropped, an
    array expanded by its assignment (`key=(...)` then `"${key[@]}"`)."""
    script = _filled(str(step.get("run", ""))).replace("\\\n", " ")
    arrays = dict(re.findall(r"\b(\w+)=\(([^)]*)\)", script))
    out = []
    for line in script.splitlines():
        line = re.sub(r'"\$\{(\w+)\[@\]\}"', lambda m: arrays.get(m.group(1), ""), line)
        for part in re.split(r"&&|;|\|\|", line):
            words = shlex.split(part, comments=True)
            if words:
                out.append(words)
    return out


def _servegate_lines(step: dict[str, Any]) -> list[list[str]]:
    return [words[1:] for words in _commands(step) if words[0].endswith("servegate")]


def _workflow(path: Path) -> dict[Any, Any]:
    loaded: dict[Any, Any] = yaml.safe_load(path.read_text())
    return loaded


def test_there_is_a_github_actions_recipe() -> None:
    assert [p.name for p in WORKFLOWS] == ["servegate-gate.yml", "servegate-vllm-gpu.yml"]


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_the_workflow_uploads_the_html_publishes_junit_and_writes_the_summary(path: Path) -> None:
    workflow = _workflow(path)
    assert {"name", "jobs"} <= set(workflow)
    assert True in workflow or "on" in workflow  # YAML 1.1 reads the key `on` as true
    steps = _steps(workflow)
    uses = [s.get("uses", "") for s in steps]
    assert any(u.startswith("actions/upload-artifact@") for u in uses)
    assert any("junit" in u for u in uses)
    runs = " ".join(str(s.get("run", "")) for s in steps)
    assert '>> "$GITHUB_STEP_SUMMARY"' in runs
    # The steps that publish run whatever the verdict: a failing gate is when they matter most.
    publishing = [
        s
        for s in steps
        if "upload-artifact" in s.get("uses", "")
        or "junit" in s.get("uses", "")
        or "GITHUB_STEP_SUMMARY" in s.get("run", "")
    ]
    assert len(publishing) == 3
    assert all(s.get("if") == "always()" for s in publishing)  # fmt: skip


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_every_servegate_command_in_the_workflow_parses(path: Path) -> None:
    _register()
    commands = [line for s in _steps(_workflow(path)) for line in _servegate_lines(s)]
    assert commands, "the workflow calls no servegate command"
    for args in commands:
        name, rest = args[0], args[1:]
        command = cli.get_command(click.Context(cli), name)
        assert command is not None, f"servegate has no command {name!r}"
        with command.make_context(name, list(rest)) as ctx:  # raises on an unknown option
            assert ctx.params
        for out in ("json", "html", "junit", "markdown"):
            assert f"--{out}" in rest, f"the workflow does not write the {out} report"


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_every_action_is_a_known_release_given_only_inputs_it_declares(path: Path) -> None:
    for step in _steps(_workflow(path)):
        if "uses" in step:
            assert step["uses"] in ACTIONS, step["uses"]
            assert set(step.get("with", {})) <= ACTIONS[step["uses"]], step


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_every_variable_and_secret_the_workflow_reads_is_documented_in_its_header(
    path: Path,
) -> None:
    text = path.read_text()
    header = "".join(line for line in text.splitlines(keepends=True) if line.startswith("#"))
    used = {name for _, name in CONTEXT_NAME.findall(" ".join(EXPRESSION.findall(text)))}
    assert {name for name in used if name not in header} == set()


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_every_command_file_and_folder_the_workflow_names_exists_when_its_step_runs(
    path: Path,
) -> None:
    """Walk the steps in order, as the runner would: a command is one the runner has, or one an
    earlier step installed; a file given to servegate is in the repository or in a folder an
    earlier step made. Installing `.` needs the repository's pyproject.toml."""
    steps = _steps(_workflow(path))
    checked_out = any(s.get("uses", "").startswith("actions/checkout@") for s in steps)
    made: set[str] = set()  # executables and folders earlier steps created
    for step in steps:
        for words in _commands(step):
            head = words[0]
            if head in SHELL_WORDS or "=" in head:
                continue
            assert head in RUNNER_COMMANDS or head in made, f"{path.name}: {head} not installed"
            if head == "mkdir":
                made.update(w.rstrip("/") for w in words[1:] if not w.startswith("-"))
            if words[1:3] == ["-m", "venv"]:
                made.add(f"{words[3]}/bin/pip")
            if head.endswith("/pip") or words[1:4] == ["-m", "pip", "install"]:
                target = words[-1].strip('"')
                # servegate is on no package index yet: the checkout, or what the user names
                assert target != "servegate", f"{path.name}: `pip install servegate` finds nothing"
                if target == ".":
                    assert checked_out
                    assert (ROOT / "pyproject.toml").is_file()
                if target in (".", "$SERVEGATE_INSTALL"):
                    made.update({"servegate", head.replace("/pip", "/servegate")})
                if target.startswith("vllm=="):
                    made.add(head.replace("/pip", "/vllm"))
            if head.endswith("servegate") and words[1] == "gate":
                _servegate_paths_resolve(words, made, checked_out)


def _servegate_paths_resolve(words: list[str], made: set[str], checked_out: bool) -> None:
    for option, value in itertools.pairwise(words):
        if option == "--config":
            assert checked_out
            assert (ROOT / value).is_file(), value
        if option in ("--json", "--html", "--junit", "--markdown", "--db", "--run-dir"):
            assert value.split("/")[0] in made, f"{option} {value}: its folder is not made"


def test_the_gpu_workflow_launches_vllm_serve_from_the_venvs_it_installs() -> None:
    from servegate.config.loader import read_gate_file, validate
    from servegate.config.models import GateConfig

    workflow = _workflow(EXAMPLES / "github-actions" / "servegate-vllm-gpu.yml")
    install = next(s["run"] for s in _steps(workflow) if "vllm==" in str(s.get("run", "")))
    [versions] = re.findall(r"for version in ([\d. ]+); do", install)
    config = EXAMPLES / "upgrade" / "vllm-gpu.yaml"
    [gate] = [w for s in _steps(workflow) for w in _servegate_lines(s)]
    assert gate[gate.index("--config") + 1] == str(config.relative_to(ROOT))
    cfg = validate(GateConfig, read_gate_file(config), str(config))
    launched = []
    for side in (cfg.baseline, cfg.candidate):
        assert side.launch is not None
        assert Path(str(side.launch.cwd)).resolve() == ROOT  # the venvs are in the checkout
        command = list(side.launch.command)
        version = side.matrix["engine_version"]
        assert command[:3] == [f".venv-vllm-gpu-{version}/bin/vllm", "serve", command[2]]
        options = [w for w in command[3:] if w.startswith("--")]
        assert set(options) <= VLLM_SERVE_OPTIONS, options
        # served under the name the gate asks for, on the port servegate picks, on loopback
        assert command[command.index("--served-model-name") + 1] == cfg.model
        assert command[command.index("--port") + 1] == "{port}"
        assert command[command.index("--host") + 1] == "127.0.0.1"
        assert "CUDA_VISIBLE_DEVICES" in side.launch.env
        assert side.launch.ready_timeout_s >= 1800  # a download and CUDA graph capture
        launched.append(version)
    assert launched == versions.split()
    assert cfg.model is not None


@pytest.mark.parametrize(
    ("name", "module"),
    [("llama-cpp-to-transformers", "transformers_model"), ("llama-cpp-to-vllm", "vllm_model")],
)
def test_the_migration_examples_are_valid_gate_configs_run_from_the_repository_root(
    name: str, module: str
) -> None:
    from servegate.config.loader import read_gate_file, validate
    from servegate.config.models import GateConfig

    path = EXAMPLES / "migration" / f"{name}.yaml"
    cfg = validate(GateConfig, read_gate_file(path), str(path))
    assert cfg.baseline.launch is not None
    assert cfg.candidate.launch is not None
    assert cfg.candidate.launch.cwd is not None
    # The candidate's interpreter is its engine's venv's, relative to the repository root.
    assert Path(cfg.candidate.launch.cwd).resolve() == EXAMPLES.parent
    assert f"servegate.engine.{module} serve" in " ".join(cfg.candidate.launch.command)
    assert "--reference" in cfg.baseline.launch.command


def test_the_vllm_upgrade_example_launches_both_versions_from_the_repository_root() -> None:
    from servegate.config.loader import read_gate_file, validate
    from servegate.config.models import GateConfig

    path = EXAMPLES / "upgrade" / "vllm-0.31-to-0.32.yaml"
    cfg = validate(GateConfig, read_gate_file(path), str(path))
    commands = []
    for side in (cfg.baseline, cfg.candidate):
        assert side.launch is not None
        assert Path(str(side.launch.cwd)).resolve() == EXAMPLES.parent
        assert side.launch.ready_timeout_s >= 600  # a CPU start compiles for minutes
        commands.append(" ".join(side.launch.command))
    assert commands == [
        f".venv-vllm-{v}/bin/python -m servegate.engine.vllm_model serve --port {{port}}"
        for v in ("0.31.0", "0.32.0")
    ]
