"""runs.pid and runs.hostname: the process writing a run, so a killed run shows `interrupted`.

Both nullable: rows written before them stay valid as they are.

Revision ID: 0002_run_process
Revises: 0001_initial
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002_run_process"
down_revision: str | None = "0001_initial"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("pid", sa.Integer, nullable=True))
        batch.add_column(sa.Column("hostname", sa.String(255), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("hostname")
        batch.drop_column("pid")
