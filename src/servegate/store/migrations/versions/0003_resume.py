"""Resume: which attempt of a run wrote each request and gate, and the endpoints' fingerprints.

`servegate gate --resume RUN` re-runs the gates a killed run did not finish, as a new attempt of
the same run. The interrupted attempt's requests stay (nothing completed is thrown away) and
readers take, per gate, only the requests of the attempt that judged it. `runs.fingerprint_json`
holds what the endpoints were when the run started, so a resume against a changed server is
refused. All nullable: a row written before this revision is attempt 1, with no fingerprint.

Revision ID: 0003_resume
Revises: 0002_run_process
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003_resume"
down_revision: str | None = "0002_run_process"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("attempt", sa.Integer, nullable=True))
        batch.add_column(sa.Column("fingerprint_json", sa.Text, nullable=True))
    with op.batch_alter_table("requests") as batch:
        batch.add_column(sa.Column("attempt", sa.Integer, nullable=True))
    with op.batch_alter_table("gate_results") as batch:
        batch.add_column(sa.Column("attempt", sa.Integer, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("gate_results") as batch:
        batch.drop_column("attempt")
    with op.batch_alter_table("requests") as batch:
        batch.drop_column("attempt")
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("fingerprint_json")
        batch.drop_column("attempt")
