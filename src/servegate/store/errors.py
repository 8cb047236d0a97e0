"""StoreError and the one-line messages it carries: which database, which operation, why.

A database error never reaches the user as a traceback or an SQL statement with its parameters
(request bodies can be long; an error text must not echo them).
"""

from __future__ import annotations

from sqlalchemy import Engine
from sqlalchemy.engine import URL
from sqlalchemy.exc import DBAPIError, SQLAlchemyError


class StoreError(Exception):
    """The database cannot be opened or written; committed rows are kept. Exit code 2."""

    exit_code = 2


# SQLite's own words for the failures a user can fix, and what to check.
_HINTS = {
    "database is locked": "another process held it longer than the busy timeout",
    "readonly database": "the file, its -wal/-shm files or its folder is read-only",
    "disk is full": "no space left for the database",
    "unable to open database file": "the file or its folder cannot be opened",
}


def where(url: URL) -> str:
    """The database as a user would name it: a SQLite file path, or the URL without password."""
    if url.get_backend_name() == "sqlite":
        return url.database or ":memory:"
    return url.render_as_string(hide_password=True)


def why(exc: SQLAlchemyError) -> str:
    """The driver's own first line (never the statement or its parameters), with a hint."""
    orig = exc.orig if isinstance(exc, DBAPIError) else None
    text = str(orig).strip().splitlines()[0] if orig is not None and str(orig).strip() else ""
    if not text:
        return exc.__class__.__name__
    hint = next((h for k, h in _HINTS.items() if k in text.lower()), None)
    return f"{text} ({hint})" if hint else text


def store_error(engine: Engine, operation: str, exc: SQLAlchemyError) -> StoreError:
    """`cannot <operation> in the database <where>: <why>` as one line."""
    return StoreError(f"cannot {operation} in the database {where(engine.url)}: {why(exc)}")
