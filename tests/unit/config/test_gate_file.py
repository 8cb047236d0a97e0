"""The `servegate gate --config` file: launch blocks, matrix fields, one-line errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from servegate.config.loader import ConfigError, read_gate_file, validate
from servegate.config.models import MANAGED_URL, GateConfig


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "gate.yaml"
    path.write_text(text)
    return path


def _load(path: Path) -> GateConfig:
    return validate(GateConfig, read_gate_file(path), str(path))


def test_a_launch_block_is_read_with_its_command_split_and_cwd_beside_the_file(
    tmp_path: Path,
) -> None:
    path = _write(
        tmp_path,
        """
baseline:
  url: http://127.0.0.1:8000/v1
candidate:
  launch:
    command: python -m my.engine --port {port}
    env: {OMP_NUM_THREADS: "1"}
    cwd: engines
    ready_timeout_s: 30
  matrix: {engine: "0.25.1", attention: flash}
""",
    )
    cfg = _load(path)
    assert cfg.candidate.launch is not None
    assert cfg.candidate.launch.command == ("python", "-m", "my.engine", "--port", "{port}")
    assert cfg.candidate.launch.cwd == tmp_path / "engines"
    assert cfg.candidate.launch.ready_timeout_s == 30
    assert cfg.candidate.url_template == MANAGED_URL
    assert cfg.candidate.matrix == {"engine": "0.25.1", "attention": "flash"}
    assert cfg.baseline.launch is None


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "baseline: {url: 'http://a/v1'}\ncandidate:\n  launch: {command: [x], colour: red}\n",
            "candidate.launch.colour: Extra inputs are not permitted",
        ),
        ("baseline: {url: 'http://a/v1'}\ncandidate: {}\n", "give a url, or a launch block"),
        (
            "baseline: {url: 'http://a/v1'}\ncandidate: {url: 'http://b:{port}/v1'}\n",
            "{port} in the url needs a launch block",
        ),
        ("baseline: {url: 'http://a/v1'}\ncandidate: {launch: {command: []}}\n", "command"),
        ("baseline: {url: 'http://a/v1'}\nlaunch: {command: [x]}\n", "launch: unknown key"),
    ],
    ids=["unknown-launch-key", "no-url-no-launch", "port-without-launch", "empty-command",
         "unknown-top-level-key"],
)  # fmt: skip
def test_a_bad_config_is_one_line_naming_the_key(tmp_path: Path, text: str, expected: str) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        _load(path)
    message = str(caught.value)
    assert expected in message
    assert str(path) in message
    assert "\n" not in message
