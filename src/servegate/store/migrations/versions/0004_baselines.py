"""baselines: a named, recorded baseline a later run compares a candidate with.

A baseline is a finished run of the baseline endpoint against itself (`servegate baseline
record`): its requests hold the answers, logprobs and noise floor; this row names it and keeps
what it was recorded from (fingerprint: models, model, suite, servegate version; the
configuration, policy included), so that a run against a different suite, policy or model is
refused instead of silently compared.

Revision ID: 0004_baselines
Revises: 0003_resume
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004_baselines"
down_revision: str | None = "0003_resume"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.create_table(
        "baselines",
        sa.Column("name", sa.String(200), primary_key=True),
        sa.Column("run_id", sa.String(32), sa.ForeignKey("runs.id"), nullable=False),
        sa.Column("created_at", sa.String(40), nullable=False),
        sa.Column("endpoint_url", sa.Text, nullable=False),
        sa.Column("model", sa.String(200), nullable=True),
        sa.Column("fingerprint_json", sa.Text, nullable=False),
        sa.Column("config_json", sa.Text, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("baselines")
