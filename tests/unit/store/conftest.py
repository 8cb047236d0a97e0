"""Reading a store database back as another program would: its own engine and connection."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, text

Rows = Callable[[str, str], list[tuple[Any, ...]]]


@pytest.fixture
def rows() -> Iterator[Rows]:
    """`rows(db, sql)`: the rows of `sql` in the database `db` (a SQLite path or a URL), read
    through a separate engine, so only what was committed is seen."""
    engines: list[Engine] = []

    def read(db: str, sql: str) -> list[tuple[Any, ...]]:
        engine = create_engine(db if "://" in db else f"sqlite:///{db}")
        engines.append(engine)
        with engine.connect() as conn:
            return [tuple(r) for r in conn.execute(text(sql))]

    yield read
    for engine in engines:
        engine.dispose()


@pytest.fixture
def engine(store_url: str) -> Iterator[Engine]:
    """servegate's engine on the test's database (SQLite, then PostgreSQL), closed at the end of
    the test, so no connection is left for the garbage collector to find in a later one."""
    from servegate.store.writer import open_engine

    opened = open_engine(store_url)
    yield opened
    opened.dispose()


def execute(db: str, sql: str) -> None:
    """Run one statement in `db` and commit it, outside servegate."""
    engine = create_engine(db if "://" in db else f"sqlite:///{db}")
    try:
        with engine.begin() as conn:
            conn.execute(text(sql))
    finally:
        engine.dispose()


@pytest.fixture
def sql() -> Callable[[str, str], None]:
    """`sql(db, statement)`: run and commit one statement in `db`, outside servegate."""
    return execute
