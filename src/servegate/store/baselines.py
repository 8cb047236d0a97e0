"""Named baselines: a recorded run of the baseline endpoint, compared with candidates later.

`servegate baseline record` runs the gates with the baseline endpoint on both sides (an A/A
run: its answers, logprobs and noise floor), and names the run here only when the baseline
passed against itself and no answer it gave is a transport failure or a timeout that the same
request asked again in the recording did not give (a glitch of the recording, not the server's
behaviour). An error answer (HTTP 500 to a capability probe; a stream the reference engine closes
without [DONE] on every tool call) or an empty one (no text, reasoning or tool calls: SmolLM2
answers the tool probe `tools-single-auto` so) is kept as evidence but never given back as the
baseline's answer (store/replay.py): the check it fed is not measured, and `baseline record`
names those probes. A baseline is found by name and used
only where its fingerprint (model, the suite, the servegate version) and its configuration
(policy included) match the run that asks for it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Engine, RowMapping, and_, delete, func, insert, select
from sqlalchemy.exc import IntegrityError, SQLAlchemyError

from servegate.config.redaction import redact_config
from servegate.endpoints.errors import ErrorCategory
from servegate.store import tables
from servegate.store.errors import StoreError, store_error, where
from servegate.store.replay import StoredEndpoint, never_truth, result_from_json
from servegate.store.resume import changed

# A baseline answer that failed in transport or time, where the same request asked again in the
# recording did not, says the recording was unhealthy: such a recording is refused. (Other error
# answers are stored as they came, and never given back as truth: see store/replay.py.)
UNHEALTHY = frozenset(
    {
        ErrorCategory.INFRA,
        ErrorCategory.TIMEOUT,
        ErrorCategory.STALLED,
        ErrorCategory.RESET,
        ErrorCategory.RATE_LIMITED,
        ErrorCategory.CANCELLED,
        ErrorCategory.NOT_SENT,
        ErrorCategory.TRUNCATED,
        ErrorCategory.TLS,
    }
)


@dataclass(frozen=True)
class StoredBaseline:
    name: str
    run_id: str
    created_at: str
    endpoint_url: str
    model: str | None
    fingerprints: dict[str, Any]
    config: dict[str, Any]


def _from_row(row: Mapping[str, Any] | RowMapping) -> StoredBaseline:
    return StoredBaseline(
        name=str(row["name"]),
        run_id=str(row["run_id"]),
        created_at=str(row["created_at"]),
        endpoint_url=str(row["endpoint_url"]),
        model=row["model"],
        fingerprints=json.loads(row["fingerprint_json"]),
        config=json.loads(row["config_json"]),
    )


def _judged(run_id: str, side: str) -> Any:
    """The requests of `side` that the attempt judging each gate sent (see store/resume.py)."""
    req, judged = tables.requests, tables.gate_results
    return (
        select(
            req.c.api,
            req.c.request_json,
            req.c.result_json,
            req.c.gate,
            req.c.probe,
            req.c.error_category,
        )
        .join(judged, and_(judged.c.run_id == req.c.run_id, judged.c.gate == req.c.gate))
        .where(
            req.c.run_id == run_id,
            req.c.side == side,
            func.coalesce(req.c.attempt, 1) == func.coalesce(judged.c.attempt, 1),
        )
        .order_by(req.c.id)
    )


def recorded_answers(
    engine: Engine, run_id: str, side: str = "baseline"
) -> list[tuple[str, str, str]]:
    """(api, request_json, result_json) of every answer `side` gave in the run, in order."""
    try:
        with engine.connect() as conn:
            return [
                (r.api, r.request_json, r.result_json) for r in conn.execute(_judged(run_id, side))
            ]
    except SQLAlchemyError as exc:
        raise store_error(engine, f"read the answers of run {run_id}", exc) from None


def _own_errors(conn: Any, run_id: str) -> set[tuple[str, str, str]]:
    """(gate, probe, error category) of the failed answers of the recording's candidate side:
    the same endpoint again (a recording is the endpoint against itself)."""
    return {
        (row.gate, row.probe, row.error_category)
        for row in conn.execute(_judged(run_id, "candidate"))
        if row.error_category is not None
    }


def untrustworthy(engine: Engine, run_id: str) -> str | None:
    """Why the baseline answers of run `run_id` cannot be stored as truth, or None: the first
    answer that failed in transport or time on the baseline side alone. One that failed the same
    way on both sides of the A/A run is the server's own behaviour (the reference engine closes
    every streamed tool-call answer without [DONE]): kept, named by `left_out`."""
    try:
        with engine.connect() as conn:
            repeated = _own_errors(conn, run_id)
            for row in conn.execute(_judged(run_id, "baseline")):
                key = (row.gate, row.probe, row.error_category)
                if row.error_category in UNHEALTHY and key not in repeated:
                    return (
                        f"the baseline's answer to {row.gate}/{row.probe} failed "
                        f"({row.error_category}) and the same request did not fail so when "
                        "asked again in the recording"
                    )
    except SQLAlchemyError as exc:
        raise store_error(engine, f"read the answers of run {run_id}", exc) from None
    return None


def left_out(engine: Engine, run_id: str) -> list[str]:
    """What of the recording is never given back as the baseline's answer (store/replay.py), so
    that runs against it list the checks those answers fed as not measured: each probe ("gate/
    probe", in order, once) answered with an empty completion or an error (a rejection, HTTP 4xx,
    is the server's own specified behaviour and is kept), with what it was."""
    out: dict[str, str] = {}
    try:
        with engine.connect() as conn:
            for row in conn.execute(_judged(run_id, "baseline")):
                where_ = f"{row.gate}/{row.probe}"
                if row.api not in ("chat", "completions") or where_ in out:
                    continue
                why = never_truth(row.api, result_from_json(row.api, row.result_json))
                if why is not None:
                    out[where_] = f"{where_} ({why})"
    except SQLAlchemyError as exc:
        raise store_error(engine, f"read the answers of run {run_id}", exc) from None
    return list(out.values())


def stored_endpoint(engine: Engine, baseline: StoredBaseline) -> StoredEndpoint:
    """The endpoint that answers as the baseline answered when it was recorded."""
    return StoredEndpoint(
        name="baseline",
        base_url=baseline.endpoint_url,
        source=f"the stored baseline {baseline.name!r}",
        models=tuple(baseline.fingerprints.get("baseline.models") or ()),
        rows=recorded_answers(engine, baseline.run_id),
    )


# What a run compared with a stored baseline must share with its recording (the flat
# fingerprints of runner.run_fingerprints): the same code asking the same probes of one model.
MUST_MATCH = ("servegate", "suite", "baseline.model")


def baseline_refusal(baseline: StoredBaseline, now: Mapping[str, Any]) -> str | None:
    """Why this run cannot be compared with `baseline`, or None."""
    why = changed(
        {k: baseline.fingerprints.get(k) for k in MUST_MATCH},
        {k: now.get(k) for k in MUST_MATCH},
        "it was recorded with another setting",
    )
    if why is None:
        return None
    return f"cannot compare with the stored baseline {baseline.name!r}: {why}; record it again"


def save_baseline(engine: Engine, baseline: StoredBaseline, *, replace: bool = False) -> None:
    """Name a recorded run as a baseline; an existing name is refused unless `replace`."""
    values = {
        "name": baseline.name,
        "run_id": baseline.run_id,
        "created_at": baseline.created_at or datetime.now(UTC).isoformat(timespec="seconds"),
        "endpoint_url": baseline.endpoint_url,
        "model": baseline.model,
        "fingerprint_json": json.dumps(baseline.fingerprints, sort_keys=True),
        "config_json": json.dumps(redact_config(baseline.config), sort_keys=True, default=str),
    }
    try:
        with engine.begin() as conn:
            if replace:
                conn.execute(
                    delete(tables.baselines).where(tables.baselines.c.name == baseline.name)
                )
            conn.execute(insert(tables.baselines).values(**values))
    except IntegrityError:
        raise StoreError(
            f"a baseline named {baseline.name!r} exists in {where(engine.url)}: choose another "
            "--name, or give --replace"
        ) from None
    except SQLAlchemyError as exc:
        raise store_error(engine, f"save the baseline {baseline.name!r}", exc) from None


def load_baseline(engine: Engine, name: str) -> StoredBaseline:
    """The baseline called `name`; a one-line StoreError when there is none."""
    try:
        with engine.connect() as conn:
            row = conn.execute(
                select(tables.baselines).where(tables.baselines.c.name == name)
            ).first()
    except SQLAlchemyError as exc:
        raise store_error(engine, f"read the baseline {name!r}", exc) from None
    if row is None:
        raise StoreError(
            f"no baseline {name!r} in {where(engine.url)} (see `servegate baseline list`)"
        )
    return _from_row(row._mapping)


def list_baselines(engine: Engine) -> list[StoredBaseline]:
    """Every baseline, newest first."""
    query = select(tables.baselines).order_by(tables.baselines.c.created_at.desc())
    try:
        with engine.connect() as conn:
            return [_from_row(r._mapping) for r in conn.execute(query)]
    except SQLAlchemyError as exc:
        raise store_error(engine, "list the baselines", exc) from None


def delete_baseline(engine: Engine, name: str) -> None:
    """Forget the name; the recorded run stays in `servegate runs`."""
    load_baseline(engine, name)
    try:
        with engine.begin() as conn:
            conn.execute(delete(tables.baselines).where(tables.baselines.c.name == name))
    except SQLAlchemyError as exc:
        raise store_error(engine, f"delete the baseline {name!r}", exc) from None


__all__ = [
    "StoredBaseline",
    "baseline_refusal",
    "delete_baseline",
    "left_out",
    "list_baselines",
    "load_baseline",
    "recorded_answers",
    "save_baseline",
    "stored_endpoint",
    "untrustworthy",
]
