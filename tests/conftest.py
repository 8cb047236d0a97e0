"""A real PostgreSQL server for the store tests: started once per session by
scripts/postgres.sh (a throwaway cluster on a free loopback port), stopped at the end.

`store_url` runs a test on SQLite (a file in tmp_path) and on PostgreSQL (a fresh database in
that server). Under the project's test command (scripts/test.sh sets SERVEGATE_REQUIRE_POSTGRES)
or in CI a PostgreSQL that cannot be started fails the tests; a bare pytest skips them with the
script's reason.
"""

from __future__ import annotations

import gc
import os
import subprocess
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "postgres.sh"

# scripts/test.sh runs pytest twice: every test but the `timed` ones on two workers, then the
# `timed` ones alone in one process (a latency measured beside another worker's engines is the
# other worker's measurement). SERVEGATE_TEST_PHASE says which half this process runs.
PHASES = {"untimed": False, "timed": True}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    phase = os.environ.get("SERVEGATE_TEST_PHASE", "")
    if not phase:
        return
    if phase not in PHASES:
        raise pytest.UsageError(f"SERVEGATE_TEST_PHASE={phase!r}: use one of {sorted(PHASES)}")
    timed = PHASES[phase]
    keep = [i for i in items if (i.get_closest_marker("timed") is not None) == timed]
    left = [i for i in items if (i.get_closest_marker("timed") is not None) != timed]
    if left:
        config.hook.pytest_deselected(items=left)
        items[:] = keep


def _required() -> bool:
    return any(os.environ.get(v) for v in ("SERVEGATE_REQUIRE_POSTGRES", "CI"))


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    """The SQLAlchemy URL of the session's PostgreSQL server (its `postgres` database)."""
    required = _required()
    command = ["bash", str(SCRIPT), "start", *([] if required else ["--no-install"])]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    lines = done.stdout.split()
    if done.returncode != 0 or len(lines) != 2:
        why = (done.stderr.strip().splitlines() or ["no output"])[-1]
        message = f"PostgreSQL not started by scripts/postgres.sh: {why}"
        if required:
            pytest.fail(message)
        pytest.skip(message)
    url, folder = lines
    try:
        yield url
    finally:
        subprocess.run(["bash", str(SCRIPT), "stop", folder], timeout=60, check=False)


@pytest.fixture
def postgres_url(postgres_server: str) -> Iterator[str]:
    """A new, empty database in the session's server, dropped after the test."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    admin = create_engine(postgres_server, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
        yield make_url(postgres_server).set(database=name).render_as_string(hide_password=False)
        # Engines a test opened and dropped still pool their connections: closed here, where
        # psycopg's "deleted while still open" ResourceWarning is expected, not in a later test.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ResourceWarning)
            gc.collect()
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE "{name}" WITH (FORCE)'))
    finally:
        admin.dispose()


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The `--db` of a new, empty database: a SQLite file path, or a PostgreSQL URL."""
    if request.param == "sqlite":
        return str(tmp_path / "runs.db")
    return str(request.getfixturevalue("postgres_url"))
