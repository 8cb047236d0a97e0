"""Alembic's environment: migrate the connection servegate.store.schema hands over.

servegate opens the connection, takes the database's write lock and checks the revision before
this runs; here the migrations only run, inside that connection's transaction.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection

from servegate.store.tables import metadata

connection = context.config.attributes["connection"]
assert isinstance(connection, Connection), "servegate.store.schema passes the connection"
context.configure(
    connection=connection,
    target_metadata=metadata,
    version_table=context.config.attributes["version_table"],
    render_as_batch=True,  # SQLite alters most things by copying the table
)
with context.begin_transaction():
    context.run_migrations()
