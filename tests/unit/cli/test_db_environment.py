"""Every command's `--db` is read from SERVEGATE_DB_URL when not given, so a database password
stays out of argv (deploy/ passes it through a Secret); a given `--db` still wins."""

from __future__ import annotations

import json
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from servegate.cli.main import _register, cli
from servegate.store.writer import RunWriter, open_engine


def _db_options() -> list[tuple[str, click.Option]]:
    _register()
    found: list[tuple[str, click.Option]] = []

    def walk(name: str, command: click.Command) -> None:
        found.extend((name, p) for p in command.params
                     if isinstance(p, click.Option) and "--db" in p.opts)  # fmt: skip
        if isinstance(command, click.Group):
            for sub, c in command.commands.items():
                walk(f"{name} {sub}", c)

    walk("servegate", cli)
    return found


def test_every_db_option_reads_the_environment() -> None:
    options = _db_options()
    assert {n for n, _ in options} >= {"servegate gate", "servegate runs", "servegate proxy"}
    assert [n for n, o in options if o.envvar != "SERVEGATE_DB_URL"] == []


def test_runs_lists_the_database_named_by_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "from-env.db"
    run_id = RunWriter.start(open_engine(db), baseline_url="http://b/v1",
                             candidate_url="http://c/v1", model="m", config={}).run_id  # fmt: skip
    _register()
    monkeypatch.setenv("SERVEGATE_DB_URL", str(db))
    listed = CliRunner().invoke(cli, ["runs", "--json"])
    assert listed.exit_code == 0, listed.output
    assert [r["id"] for r in json.loads(listed.output)] == [run_id]
    open_engine(tmp_path / "other.db").dispose()  # an empty database: a read creates none
    given = CliRunner().invoke(cli, ["runs", "--json", "--db", str(tmp_path / "other.db")])
    assert given.exit_code == 0, given.output
    assert json.loads(given.output) == []
