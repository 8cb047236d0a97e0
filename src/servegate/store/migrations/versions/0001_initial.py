"""The store as servegate 0.1.0 created it: runs, requests, gate_results.

Frozen: this is the DDL `metadata.create_all` emitted before migrations existed (git 8b196a7),
so a database made that way is stamped with this revision and upgraded from it.

Revision ID: 0001_initial
Revises: (none)
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001_initial"
down_revision: str | None = None
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.create_table(
        "runs",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("name", sa.String(200), nullable=True),
        sa.Column("started_at", sa.String(40), nullable=False),
        sa.Column("finished_at", sa.String(40), nullable=True),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("verdict", sa.String(16), nullable=True),
        sa.Column("exit_code", sa.Integer, nullable=True),
        sa.Column("reason", sa.Text, nullable=True),
        sa.Column("baseline_url", sa.Text, nullable=False),
        sa.Column("candidate_url", sa.Text, nullable=False),
        sa.Column("model", sa.String(200), nullable=True),
        sa.Column("config_json", sa.Text, nullable=False),
        sa.Column("report_json", sa.Text, nullable=True),
    )
    op.create_table(
        "requests",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("run_id", sa.String(32), sa.ForeignKey("runs.id"), nullable=False),
        sa.Column("gate", sa.String(40), nullable=False),
        sa.Column("probe", sa.String(200), nullable=False),
        sa.Column("side", sa.String(40), nullable=False),
        sa.Column("api", sa.String(20), nullable=False),
        sa.Column("recorded_at", sa.String(40), nullable=False),
        sa.Column("request_json", sa.Text, nullable=False),
        sa.Column("http_status", sa.Integer, nullable=True),
        sa.Column("error_category", sa.String(40), nullable=True),
        sa.Column("error_message", sa.Text, nullable=True),
        sa.Column("content", sa.Text, nullable=True),
        sa.Column("finish_reason", sa.String(40), nullable=True),
        sa.Column("ttft_ms", sa.Float, nullable=True),
        sa.Column("e2el_ms", sa.Float, nullable=True),
        sa.Column("result_json", sa.Text, nullable=False),
    )
    op.create_index("ix_requests_run_probe", "requests", ["run_id", "gate", "probe", "side"])
    op.create_table(
        "gate_results",
        sa.Column("run_id", sa.String(32), sa.ForeignKey("runs.id"), primary_key=True),
        sa.Column("gate", sa.String(40), primary_key=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("result_json", sa.Text, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("gate_results")
    op.drop_index("ix_requests_run_probe", table_name="requests")
    op.drop_table("requests")
    op.drop_table("runs")
