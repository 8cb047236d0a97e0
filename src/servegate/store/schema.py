"""The store's schema version: every database is brought to this version's head when opened.

The Alembic migrations in `store/migrations` are the history of `store/tables.py`. Opening a
database under the write lock (SQLite `BEGIN IMMEDIATE`, a PostgreSQL advisory lock), so that
two servegates opening one database migrate it once:
- empty: migrated from the first revision;
- made by servegate 0.1.0's `metadata.create_all` (no version table): its columns are checked,
  it is stamped with the revision they match, then upgraded; a table of ours without a column it
  needs belongs to another schema and is refused, untouched;
- at head: nothing is done;
- at a revision this version does not know (a newer servegate wrote it): refused, never
  downgraded.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Connection, Engine, inspect, text

from servegate.store.errors import StoreError, where

if TYPE_CHECKING:
    from alembic.config import Config
    from alembic.script import ScriptDirectory

VERSION_TABLE = "servegate_alembic_version"  # not `alembic_version`: a shared database may
# hold another application's
MIGRATIONS = Path(__file__).parent / "migrations"
PG_LOCK_KEY = 0x5E12_6A7E  # pg_advisory_xact_lock key held while the schema is checked

# The tables as servegate 0.1.0 created them (revision 0001), and what each later revision that
# predates the version table added: a database without a version table is matched against these.
V1_COLUMNS: dict[str, frozenset[str]] = {
    "runs": frozenset(
        [
            "id",
            "name",
            "started_at",
            "finished_at",
            "state",
            "verdict",
            "exit_code",
            "reason",
            "baseline_url",
            "candidate_url",
            "model",
            "config_json",
            "report_json",
        ]
    ),
    "requests": frozenset(
        [
            "id",
            "run_id",
            "gate",
            "probe",
            "side",
            "api",
            "recorded_at",
            "request_json",
            "http_status",
            "error_category",
            "error_message",
            "content",
            "finish_reason",
            "ttft_ms",
            "e2el_ms",
            "result_json",
        ]
    ),
    "gate_results": frozenset(["run_id", "gate", "status", "result_json"]),
}
UNVERSIONED = (("0002_run_process", "runs", frozenset({"pid", "hostname"})),)


def alembic_config(connection: Connection | None = None) -> Config:
    """Alembic's configuration, built here: no alembic.ini is read."""
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.set_main_option("path_separator", "os")
    cfg.attributes["connection"] = connection
    cfg.attributes["version_table"] = VERSION_TABLE
    return cfg


def _script() -> ScriptDirectory:
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(alembic_config())


def head() -> str:
    """This version's schema revision."""
    return str(_script().get_current_head())


def _lock(conn: Connection) -> None:
    if conn.dialect.name == "sqlite":
        conn.exec_driver_sql("BEGIN IMMEDIATE")  # waits for another writer up to busy_timeout
    elif conn.dialect.name == "postgresql":
        conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": PG_LOCK_KEY})


def unversioned_revision(conn: Connection) -> str | None:
    """The revision a database without a version table is at: None when it holds none of our
    tables, else the last revision whose columns it has. Refused when a table of ours lacks a
    column servegate 0.1.0 created, or a later revision's columns are there only in part."""
    name = where(conn.engine.url)
    have = set(inspect(conn).get_table_names())
    ours = [t for t in V1_COLUMNS if t in have]
    if not ours:
        return None
    columns = {t: {c["name"] for c in inspect(conn).get_columns(t)} for t in ours}
    for table, needed in V1_COLUMNS.items():
        if table not in columns:
            raise StoreError(
                f"the database {name} has a '{ours[0]}' table but no '{table}' table: it belongs "
                "to another schema; use a new --db"
            )
        missing = sorted(needed - columns[table])
        if missing:
            raise StoreError(
                f"the database {name} has a '{table}' table without the column '{missing[0]}'"
                ": it belongs to another schema; use a new --db"
            )
    revision = "0001_initial"
    for later, table, added in UNVERSIONED:
        present = added & columns[table]
        if present == added:
            revision = later
        elif present:
            raise StoreError(
                f"the database {name} has only part of revision {later} "
                f"({', '.join(sorted(present))} without {', '.join(sorted(added - present))}"
                f" in '{table}'); use a new --db"
            )
    return revision


def _refuse_unknown(engine: Engine, current: tuple[str, ...], known: set[str], target: str) -> None:
    unknown = [r for r in current if r not in known]
    if unknown:
        raise StoreError(
            f"the database {where(engine.url)} is at schema revision {unknown[0]}, which "
            f"this servegate does not know (it knows up to {target}): a newer servegate "
            "wrote it; upgrade servegate or use another --db"
        )


def upgrade(engine: Engine) -> None:
    """Bring the database to head (see the module's docstring). A database already at head is
    only read, so a read-only one opens. Raises StoreError; database errors come through as
    SQLAlchemyError for the caller to word."""
    from alembic import command
    from alembic.runtime.migration import MigrationContext
    from alembic.util import CommandError

    script = _script()
    target = str(script.get_current_head())
    known = {s.revision for s in script.walk_revisions()}
    opts = {"version_table": VERSION_TABLE}
    with engine.connect() as conn:
        current = tuple(MigrationContext.configure(conn, opts=opts).get_current_heads())
    _refuse_unknown(engine, current, known, target)
    if current == (target,):
        return
    with engine.connect() as conn:
        _lock(conn)
        ctx = MigrationContext.configure(conn, opts=opts)
        current = tuple(ctx.get_current_heads())  # another servegate may have migrated it
        _refuse_unknown(engine, current, known, target)
        if not current:
            found = unversioned_revision(conn)
            if found is not None:
                ctx.stamp(script, found)
        if tuple(ctx.get_current_heads()) != (target,):
            try:
                command.upgrade(alembic_config(conn), "head")
            except CommandError as exc:
                raise StoreError(
                    f"cannot migrate the database {where(engine.url)}: {exc}"
                ) from None
        conn.commit()
