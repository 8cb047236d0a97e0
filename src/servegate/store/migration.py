"""Bring an older database up to this version's tables: missing nullable columns are added.

The only change the store allows itself without a migration tool: a new column that may be NULL,
so rows written by an older servegate stay valid as they are. A missing column that may not be
NULL means the database belongs to a different schema, and is refused.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Column, Engine, MetaData, Table, inspect, text
from sqlalchemy.exc import SQLAlchemyError

from servegate.store.errors import StoreError, store_error, where


def _column_names(engine: Engine, table: str) -> set[str]:
    return {c["name"] for c in inspect(engine).get_columns(table)}


def _add_column_ddl(engine: Engine, table: Table, column: Column[Any]) -> str:
    quote = engine.dialect.identifier_preparer.quote
    kind = column.type.compile(dialect=engine.dialect)
    return f"ALTER TABLE {quote(table.name)} ADD COLUMN {quote(column.name)} {kind}"


def add_missing_columns(engine: Engine, metadata: MetaData) -> list[str]:
    """Add each nullable column of `metadata` that an existing table lacks; `table.column` names
    of those added. Tables that do not exist yet are left to `create_all`. A table that lacks a
    required column is refused before anything is altered."""
    missing: list[tuple[Table, Column[Any]]] = []
    try:
        existing = set(inspect(engine).get_table_names())
        for table in metadata.sorted_tables:
            if table.name in existing:
                have = _column_names(engine, table.name)
                missing += [(table, c) for c in table.columns if c.name not in have]
    except SQLAlchemyError as exc:
        raise store_error(engine, "read the tables", exc) from None
    for table, column in missing:
        if not column.nullable or column.primary_key:
            raise StoreError(
                f"the database {where(engine.url)} has a '{table.name}' table without the "
                f"column '{column.name}': it belongs to another schema; use a new --db"
            )
    added: list[str] = []
    for table, column in missing:
        try:
            with engine.begin() as conn:
                conn.execute(text(_add_column_ddl(engine, table, column)))
        except SQLAlchemyError as exc:
            # Another servegate opening the same database may have added it first.
            if column.name not in _column_names(engine, table.name):
                raise store_error(
                    engine, f"add the column {table.name}.{column.name}", exc
                ) from None
            continue
        added.append(f"{table.name}.{column.name}")
    return added
