"""runs.heartbeat_at: when the process writing a run last said it is alive.

A run killed in another host or container cannot be checked by its pid; once its heartbeat is
older than the lease (store/heartbeat.py) it may be taken over by `gate --resume RUN`. Nullable:
rows written before it stay valid (and are shown as stored).

Revision ID: 0006_run_heartbeat
Revises: 0005_proxy
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006_run_heartbeat"
down_revision: str | None = "0005_proxy"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("heartbeat_at", sa.String(40), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("heartbeat_at")
