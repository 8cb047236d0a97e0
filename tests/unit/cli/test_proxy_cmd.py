"""`servegate proxy` refuses what cannot work with one line and exit 2, before it listens."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from servegate.cli.proxy_cmd import proxy_command

P, C = "http://127.0.0.1:1/v1", "http://127.0.0.1:2/v1"


def test_help_explains_the_mirror_and_its_endpoints() -> None:
    result = CliRunner().invoke(proxy_command, ["--help"])
    assert result.exit_code == 0
    for words in ("/servegate/metrics", "/servegate/healthz", "--sample", "bounded queue",
                  "never reaches the candidate", "redacted"):  # fmt: skip
        assert words in " ".join(result.output.split()), words


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--candidate-key-env", "SERVEGATE_TEST_UNSET_VAR"],
            "SERVEGATE_TEST_UNSET_VAR is not set",
        ),
        (["--mode", "canary"], "--mode canary needs the canary controller"),
        (["--candidate", "http://u:secretpw@h/v1"], "must not carry credentials"),
        (["--candidate", P], "the same upstream"),
        (["--listen", "nowhere"], "expected HOST:PORT"),
    ],
    ids=["key-env-unset", "canary-unavailable", "credentials", "same-upstream", "listen"],
)
def test_a_bad_option_is_one_line_and_exit_2(
    tmp_path: Path, args: list[str], message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SERVEGATE_TEST_UNSET_VAR", raising=False)
    base = {"--primary": P, "--candidate": C, "--db": str(tmp_path / "p.db")}
    for flag, value in zip(args[::2], args[1::2], strict=True):
        base[flag] = value
    argv = [a for pair in base.items() for a in pair]
    result = CliRunner().invoke(proxy_command, argv)
    assert result.exit_code == 2
    assert message in result.output
    assert "secretpw" not in result.output
    assert "Traceback" not in result.output
