"""SQLAlchemy Core tables: runs, every request with its result, and judged gates.

Designed to grow: baselines (keyed by endpoint fingerprint), resume (a request is identified by
run, gate, probe and side) and reports hang off these. Every change here comes with an Alembic
revision in store/migrations/versions; the tests compare a migrated database with this metadata.
"""

from __future__ import annotations

from sqlalchemy import (
    Column,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
)

metadata = MetaData()

runs = Table(
    "runs",
    metadata,
    Column("id", String(32), primary_key=True),
    Column("name", String(200), nullable=True),
    Column("started_at", String(40), nullable=False),
    Column("finished_at", String(40), nullable=True),
    Column("state", String(16), nullable=False),  # running | finished | error | crashed
    Column("verdict", String(16), nullable=True),
    Column("exit_code", Integer, nullable=True),
    Column("reason", Text, nullable=True),
    Column("baseline_url", Text, nullable=False),
    Column("candidate_url", Text, nullable=False),
    Column("model", String(200), nullable=True),
    Column("config_json", Text, nullable=False),
    Column("report_json", Text, nullable=True),
    # The process writing the run, so that a reader can tell a live run from a killed one
    # (revision 0002_run_process; nullable, so older rows stay valid).
    Column("pid", Integer, nullable=True),
    Column("hostname", String(255), nullable=True),
    # Resume (revision 0003_resume): the attempt now writing the run (NULL: 1), and the
    # endpoints' fingerprints when it started, so that a resume against a changed server is
    # refused.
    Column("attempt", Integer, nullable=True),
    Column("fingerprint_json", Text, nullable=True),
    # The writer's last sign of life (revision 0006_run_heartbeat; store/heartbeat.py): a run
    # whose heartbeat is older than the lease may be taken over from any host.
    Column("heartbeat_at", String(40), nullable=True),
)

requests = Table(
    "requests",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("run_id", String(32), ForeignKey("runs.id"), nullable=False),
    Column("gate", String(40), nullable=False),
    Column("probe", String(200), nullable=False),
    Column("side", String(40), nullable=False),
    Column("api", String(20), nullable=False),
    Column("recorded_at", String(40), nullable=False),
    Column("request_json", Text, nullable=False),
    Column("http_status", Integer, nullable=True),
    Column("error_category", String(40), nullable=True),
    Column("error_message", Text, nullable=True),
    Column("content", Text, nullable=True),
    Column("finish_reason", String(40), nullable=True),
    Column("ttft_ms", Float, nullable=True),
    Column("e2el_ms", Float, nullable=True),
    Column("result_json", Text, nullable=False),
    Column("attempt", Integer, nullable=True),  # the run's attempt that sent it (NULL: 1)
)
Index(
    "ix_requests_run_probe", requests.c.run_id, requests.c.gate, requests.c.probe, requests.c.side
)

gate_results = Table(
    "gate_results",
    metadata,
    Column("run_id", String(32), ForeignKey("runs.id"), primary_key=True),
    Column("gate", String(40), primary_key=True),
    Column("status", String(16), nullable=False),
    Column("result_json", Text, nullable=False),
    Column("attempt", Integer, nullable=True),  # the attempt that judged it (NULL: 1)
)

baselines = Table(
    "baselines",
    metadata,
    Column("name", String(200), primary_key=True),
    Column("run_id", String(32), ForeignKey("runs.id"), nullable=False),
    Column("created_at", String(40), nullable=False),
    Column("endpoint_url", Text, nullable=False),
    Column("model", String(200), nullable=True),
    Column("fingerprint_json", Text, nullable=False),  # flat: baseline.models, suite, servegate…
    Column("config_json", Text, nullable=False),  # the recording's GateConfig, policy included
)

# `servegate proxy` (revision 0005_proxy): a session is one proxy identity, kept across restarts;
# its mirrored pairs (redacted before they are written) and the canary's judged intervals.
proxy_sessions = Table(
    "proxy_sessions",
    metadata,
    Column("id", String(200), primary_key=True),
    Column("started_at", String(40), nullable=False),
    Column("updated_at", String(40), nullable=False),
    Column("mode", String(16), nullable=False),  # shadow | canary
    Column("primary_url", Text, nullable=False),
    Column("candidate_url", Text, nullable=False),
    Column("config_json", Text, nullable=False),
    Column("state_json", Text, nullable=True),  # the canary's state (step, weight, phase)
)

proxy_pairs = Table(
    "proxy_pairs",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("session_id", String(200), ForeignKey("proxy_sessions.id"), nullable=False),
    Column("recorded_at", String(40), nullable=False),
    Column("path", String(200), nullable=False),
    Column("request_json", Text, nullable=False),
    Column("primary_json", Text, nullable=False),  # status, body or text, timings
    Column("candidate_json", Text, nullable=True),  # NULL: dropped or not mirrored
    Column("comparison_json", Text, nullable=True),
)
Index("ix_proxy_pairs_session", proxy_pairs.c.session_id, proxy_pairs.c.id)

canary_decisions = Table(
    "canary_decisions",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("session_id", String(200), ForeignKey("proxy_sessions.id"), nullable=False),
    Column("decided_at", String(40), nullable=False),
    Column("step_index", Integer, nullable=False),
    Column("weight", Float, nullable=False),
    Column("action", String(16), nullable=False),  # promote | hold | rollback | complete
    Column("score", Float, nullable=True),
    Column("evidence_json", Text, nullable=False),
)
Index("ix_canary_decisions_session", canary_decisions.c.session_id, canary_decisions.c.id)
