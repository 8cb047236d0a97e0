"""The CI recipes under examples/ are valid YAML and call servegate as it parses today: every
`servegate …` command line in them is parsed by the real command, so a renamed option fails here."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import click
import pytest
import yaml

from servegate.cli.main import _register, cli

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
WORKFLOWS = sorted(EXAMPLES.glob("github-actions/*.yml"))
EXPRESSION = re.compile(r"\$\{\{[^}]*\}\}")  # a GitHub expression, filled in by the runner


def _steps(workflow: dict[Any, Any]) -> list[dict[str, Any]]:
    return [step for job in workflow["jobs"].values() for step in job["steps"]]


def _servegate_lines(step: dict[str, Any]) -> list[list[str]]:
    script = EXPRESSION.sub("http://127.0.0.1:8000/v1", str(step.get("run", "")))
    return [words[1:] for line in script.splitlines()
            if (words := shlex.split(line)) and words[0].endswith("servegate")]  # fmt: skip


def test_there_is_a_github_actions_recipe() -> None:
    assert [p.name for p in WORKFLOWS] == ["servegate-gate.yml", "servegate-vllm-gpu.yml"]


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_the_workflow_uploads_the_html_publishes_junit_and_writes_the_summary(path: Path) -> None:
    workflow = yaml.safe_load(path.read_text())
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
    commands = [line for s in _steps(yaml.safe_load(path.read_text()))
                for line in _servegate_lines(s)]  # fmt: skip
    assert commands, "the workflow calls no servegate command"
    for args in commands:
        name, rest = args[0], args[1:]
        command = cli.get_command(click.Context(cli), name)
        assert command is not None, f"servegate has no command {name!r}"
        with command.make_context(name, list(rest)) as ctx:  # raises on an unknown option
            assert ctx.params
        for out in ("json", "html", "junit", "markdown"):
            assert f"--{out}" in rest, f"the workflow does not write the {out} report"


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
