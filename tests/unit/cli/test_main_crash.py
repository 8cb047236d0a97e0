"""A crash is one line with exit code 4 and no secret: the text of an unexpected exception is
printed with URL passwords, bearer tokens, key-like flags and the values of secret-named
environment variables hidden."""

from __future__ import annotations

from collections.abc import Iterator

import click
import pytest

from servegate.cli.main import cli, main

KEY = "sk-crash-canary-0b7e"
PASSWORD = "pw-crash-4411"


@pytest.fixture
def crashing() -> Iterator[None]:
    @click.command("crash-for-test")
    def crash() -> None:
        raise RuntimeError(
            f"cannot reach postgresql://sg:{PASSWORD}@db:5432/runs with header "
            f"'Authorization: Bearer {KEY}' (launch: engine --api-key {KEY}); key {KEY}\n"
        )

    cli.add_command(crash)
    yield
    cli.commands.pop("crash-for-test")


def test_an_internal_error_prints_one_line_without_any_secret(
    crashing: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SERVEGATE_TEST_API_KEY", KEY)
    monkeypatch.setattr("sys.argv", ["servegate", "crash-for-test"])
    with pytest.raises(SystemExit) as ended:
        main()
    err = capsys.readouterr().err
    assert ended.value.code == 4
    assert len(err.splitlines()) == 1, err
    assert err.startswith(
        "servegate: internal error: RuntimeError: cannot reach postgresql://sg:***@"
    )
    assert KEY not in err
    assert PASSWORD not in err
