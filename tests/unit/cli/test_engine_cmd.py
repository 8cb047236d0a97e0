from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from servegate.cli.engine_cmd import engine


def test_variants_lists_every_variant_and_fault_with_a_description() -> None:
    result = CliRunner().invoke(engine, ["variants"])
    assert result.exit_code == 0
    for name in ("clean", "mixed-dtype", "drift", "mmap-off", "hang-long", "stream-utf8"):
        assert any(
            line.split()[:1] == [name] and len(line.split()) > 2
            for line in result.output.splitlines()
        )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["serve", "--variant", "nope"], "unknown variant 'nope'"),
        (["serve", "--fault", "nope"], "unknown fault 'nope'"),
    ],
    ids=["unknown-variant", "unknown-fault"],
)
def test_serve_refuses_unknown_names_with_one_line_and_exit_2(
    args: list[str], message: str
) -> None:
    result = CliRunner().invoke(engine, args)
    assert result.exit_code == 2
    assert message in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_convert_in_an_interpreter_without_transformers_names_the_setup_command(
    tmp_path: Path,
) -> None:
    # A real child interpreter whose `import torch`/`import transformers` fails.
    blocked = tmp_path / "python"
    blocked.write_text(
        f"#!/bin/sh\nexec {sys.executable} -c 'import sys, runpy; "
        'sys.modules["torch"] = None; sys.argv[1:] = sys.argv[3:]; '
        'runpy.run_module("servegate.engine.transformers_model", run_name="__main__")\' '
        '"$@"\n'
    )
    blocked.chmod(0o755)
    args = ["convert", "--to", "transformers", "--python", str(blocked)]
    args += ["--cache-dir", str(tmp_path / "cache")]
    result = subprocess.run(
        [sys.executable, "-m", "servegate", "engine", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines() == [
        f"error: torch is not installed in {sys.executable}; "
        "run: bash scripts/setup.sh transformers"
    ]
    assert not (tmp_path / "cache").exists()


def test_convert_with_a_missing_interpreter_is_one_line_and_exit_2(tmp_path: Path) -> None:
    missing = tmp_path / "no-python"
    args = ["convert", "--to", "transformers", "--python", str(missing)]
    result = CliRunner().invoke(engine, args)
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        f"servegate: error: --python {missing}: No such file or directory"
    ]
