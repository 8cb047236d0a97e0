"""Bad input is one line and exit code 2, never a traceback or exit 4: a configuration, policy
or log-pattern file that is not UTF-8, a --run-dir servegate cannot write (checked before any
engine is launched), nan or inf in a numeric option or a policy key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from servegate.cli.main import _register, cli

NOT_UTF8 = b"gates: [startup]\n# caf\xe9 \xff\xfe\n"


def _invoke(*args: str) -> tuple[int, list[str]]:
    _register()
    result = CliRunner().invoke(cli, list(args))
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(
        result.exception
    )
    return result.exit_code, result.output.strip().splitlines()


def _launch_config(tmp_path: Path, **extra: object) -> Path:
    marker = tmp_path / "launched"
    config = {
        "baseline": {"launch": {"command": ["touch", str(marker)], "ready_timeout_s": 5}},
        "candidate": {"url": "http://127.0.0.1:9/v1"},
        "gates": ["startup"],
        **extra,
    }
    path = tmp_path / "gate.yaml"
    path.write_text(json.dumps(config))
    return path


@pytest.mark.parametrize("option", ["--config", "--policy", "--log-patterns"])
def test_a_file_that_is_not_utf8_is_one_line_naming_it(tmp_path: Path, option: str) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(NOT_UTF8)
    args = ["gate", option, str(bad), "--no-store", "--quiet"]
    if option != "--config":
        args += ["--config", str(_launch_config(tmp_path, run_dir=str(tmp_path / "runs")))]
    code, lines = _invoke(*args)
    assert (code, len(lines)) == (2, 1), lines
    assert lines[0].startswith(f"servegate: error: {bad}: not UTF-8 text"), lines
    assert not (tmp_path / "launched").exists()


def test_a_run_dir_that_cannot_be_written_is_refused_before_launching(tmp_path: Path) -> None:
    a_file = tmp_path / "a-file"
    a_file.write_text("not a folder")
    config = _launch_config(tmp_path, run_dir=str(a_file / "runs"))
    code, lines = _invoke("gate", "--config", str(config), "--no-store", "--quiet")
    assert (code, len(lines)) == (2, 1), lines
    assert lines[0].startswith(f"servegate: error: --run-dir {a_file / 'runs'}: cannot write"), (
        lines
    )
    assert not (tmp_path / "launched").exists()  # nothing was started


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "NaN"])
@pytest.mark.parametrize(
    "args",
    [
        ["gate", "--baseline", "http://127.0.0.1:9/v1", "--candidate", "http://127.0.0.1:8/v1",
         "--no-store", "--deadline-s"],
        ["probe", "http://127.0.0.1:9/v1", "--deadline-s"],
        ["bench", "--endpoint", "http://127.0.0.1:9/v1", "--duration-s"],
        ["bench", "--endpoint", "http://127.0.0.1:9/v1", "--rate"],
        ["gate", "--baseline", "http://127.0.0.1:9/v1", "--candidate", "http://127.0.0.1:8/v1",
         "--no-store", "--run-deadline-s"],
    ],
    ids=["gate", "probe", "bench", "bench-rate", "gate-run-deadline"],
)  # fmt: skip
def test_nan_or_inf_in_a_numeric_option_is_one_line(args: list[str], value: str) -> None:
    code, lines = _invoke(*args, value)
    assert code == 2, lines
    assert any("finite number" in line for line in lines), lines


@pytest.mark.parametrize("value", [".nan", ".inf", "-.inf"])
def test_nan_or_inf_in_a_policy_key_is_one_line_naming_it(tmp_path: Path, value: str) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(f"perplexity_z_max: {value}\n")
    code, lines = _invoke("gate", "--baseline", "http://127.0.0.1:9/v1", "--candidate",
                          "http://127.0.0.1:8/v1", "--policy", str(policy),
                          "--no-store")  # fmt: skip
    assert (code, len(lines)) == (2, 1), lines
    assert lines[0].startswith(f"servegate: error: {policy}: perplexity_z_max: "), lines
    assert "finite" in lines[0]


def test_a_capture_file_that_cannot_be_written_is_refused_before_serving(tmp_path: Path) -> None:
    # Issue 20 item 18: an unwritable --capture was found on the first request. /proc refuses
    # new files even to root.
    code, lines = _invoke(
        "proxy", "--primary", "http://127.0.0.1:9/v1", "--candidate", "http://127.0.0.1:8/v1",
        "--store-bodies", "full", "--capture", "/proc/servegate-capture.jsonl",
        "--db", str(tmp_path / "proxy.db"),
    )  # fmt: skip
    assert (code, len(lines)) == (2, 1), lines
    assert lines[0].startswith("servegate: error: --capture /proc: cannot write"), lines
