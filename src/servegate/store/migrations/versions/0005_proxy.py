"""proxy: mirrored pairs of `servegate proxy` (shadow) and the canary's decisions.

A proxy session (`proxy_sessions`) is one `servegate proxy` process lifetime sharing an id across
restarts (`--session NAME`), so that a canary resumes at the step it had reached. Every mirrored
pair is one row of `proxy_pairs`, redacted before it is written; every canary interval judged is
one row of `canary_decisions` with the evidence it was judged on.

Revision ID: 0005_proxy
Revises: 0004_baselines
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005_proxy"
down_revision: str | None = "0004_baselines"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.create_table(
        "proxy_sessions",
        sa.Column("id", sa.String(200), primary_key=True),
        sa.Column("started_at", sa.String(40), nullable=False),
        sa.Column("updated_at", sa.String(40), nullable=False),
        sa.Column("mode", sa.String(16), nullable=False),
        sa.Column("primary_url", sa.Text, nullable=False),
        sa.Column("candidate_url", sa.Text, nullable=False),
        sa.Column("config_json", sa.Text, nullable=False),
        sa.Column("state_json", sa.Text, nullable=True),
    )
    op.create_table(
        "proxy_pairs",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("session_id", sa.String(200), sa.ForeignKey("proxy_sessions.id"), nullable=False),
        sa.Column("recorded_at", sa.String(40), nullable=False),
        sa.Column("path", sa.String(200), nullable=False),
        sa.Column("request_json", sa.Text, nullable=False),
        sa.Column("primary_json", sa.Text, nullable=False),
        sa.Column("candidate_json", sa.Text, nullable=True),
        sa.Column("comparison_json", sa.Text, nullable=True),
    )
    op.create_index("ix_proxy_pairs_session", "proxy_pairs", ["session_id", "id"])
    op.create_table(
        "canary_decisions",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("session_id", sa.String(200), sa.ForeignKey("proxy_sessions.id"), nullable=False),
        sa.Column("decided_at", sa.String(40), nullable=False),
        sa.Column("step_index", sa.Integer, nullable=False),
        sa.Column("weight", sa.Float, nullable=False),
        sa.Column("action", sa.String(16), nullable=False),
        sa.Column("score", sa.Float, nullable=True),
        sa.Column("evidence_json", sa.Text, nullable=False),
    )
    op.create_index("ix_canary_decisions_session", "canary_decisions", ["session_id", "id"])


def downgrade() -> None:
    op.drop_index("ix_canary_decisions_session", table_name="canary_decisions")
    op.drop_table("canary_decisions")
    op.drop_index("ix_proxy_pairs_session", table_name="proxy_pairs")
    op.drop_table("proxy_pairs")
    op.drop_table("proxy_sessions")
