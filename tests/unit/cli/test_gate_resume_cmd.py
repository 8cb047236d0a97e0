"""`servegate gate --resume RUN`: each bad use is one line with exit code 2, the database
untouched. (The kill -9 and resume of a real run is tests/integration/test_gate_resume.py.)"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

from servegate.cli.gate_cmd import gate
from servegate.store.writer import RunWriter, open_engine


def _db_with_a_finished_run(db: Path) -> str:
    writer = RunWriter.start(open_engine(db), baseline_url="http://b/v1",
                             candidate_url="http://c/v1", model="m", config={})  # fmt: skip
    with sqlite3.connect(db) as conn:
        conn.execute("update runs set state = 'finished', verdict = 'pass' where id = ?",
                     (writer.run_id,))  # fmt: skip
    return writer.run_id


# Without both URLs, a --config file or --resume there is nothing to compare.
NOTHING = "give both --baseline URL and --candidate URL, or --config FILE (or --resume RUN alone)"


def _dump(db: Path) -> list[str]:
    with sqlite3.connect(db) as conn:
        return list(conn.iterdump())


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--resume", "nosuchrun"], "no run nosuchrun in {db} (see `servegate runs`)"),
        (["--resume", "{run}"], "run {run} finished with verdict pass: nothing to resume"),
        (["--resume", "{run}", "--no-store"], "--resume needs the run's database: drop --no-store"),
        (["--baseline", "http://127.0.0.1:9/v1"], NOTHING),
        ([], NOTHING),
    ],
    ids=["unknown-run", "finished-run", "no-store", "baseline-only", "nothing"],
)
def test_a_bad_resume_is_one_line_with_exit_2_and_the_database_untouched(
    tmp_path: Path, args: list[str], message: str
) -> None:
    db = tmp_path / "runs.db"
    run_id = _db_with_a_finished_run(db)
    before = _dump(db)
    argv = [a.format(run=run_id) for a in args]
    result = CliRunner().invoke(gate, [*argv, "--db", str(db), "--quiet"])
    assert result.exit_code == 2, result.output
    assert result.output.strip().splitlines() == [
        f"servegate: error: {message.format(db=db, run=run_id)}"
    ]
    assert _dump(db) == before
