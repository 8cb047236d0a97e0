"""`servegate runs`: a killed run reads `interrupted`, a crashed one `crashed` with its reason."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from servegate.cli.runs_cmd import runs
from servegate.store.writer import RunWriter, open_engine


def _gone_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def _runs_db(db: Path) -> dict[str, str]:
    engine = open_engine(db)
    ids = {}
    for name in ("killed", "alive", "crashed"):
        ids[name] = RunWriter.start(
            engine, baseline_url="http://b/v1", candidate_url="http://c/v1", model=None, config={}
        ).run_id
    RunWriter(engine, ids["crashed"]).crashed("RuntimeError: boom")
    with sqlite3.connect(db) as conn:
        conn.execute("update runs set pid = ? where id = ?", (_gone_pid(), ids["killed"]))
    return ids


def test_runs_json_shows_killed_runs_as_interrupted(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    ids = _runs_db(db)
    result = CliRunner().invoke(runs, ["--db", str(db), "--json"])
    assert result.exit_code == 0, result.output
    by_id = {r["id"]: r for r in json.loads(result.output)}
    assert {name: by_id[run_id]["state"] for name, run_id in ids.items()} == {
        "killed": "interrupted",
        "alive": "running",
        "crashed": "crashed",
    }
    assert by_id[ids["crashed"]]["reason"] == "RuntimeError: boom"


def test_a_corrupt_or_foreign_database_file_is_one_line_and_left_untouched(
    tmp_path: Path,
) -> None:
    import os

    from servegate.cli.gate_cmd import gate

    corrupt = tmp_path / "corrupt.db"
    corrupt.write_bytes(os.urandom(8192))
    foreign = tmp_path / "foreign.db"
    with sqlite3.connect(foreign) as conn:
        conn.execute("create table runs (x integer)")
    for path, message in (
        (corrupt, f"cannot open the database {corrupt}: file is not a database"),
        (foreign, f"the database {foreign} has a 'runs' table without the column 'baseline_url': "
                  "it belongs to another schema; use a new --db"),
    ):  # fmt: skip
        before = path.read_bytes()
        for command, args in ((runs, []), (gate, ["--resume", "abc"])):
            result = CliRunner().invoke(command, [*args, "--db", str(path)])
            assert result.exit_code == 2, result.output
            assert result.output.strip().splitlines() == [f"servegate: error: {message}"]
        assert path.read_bytes() == before
