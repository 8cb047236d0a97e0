"""A run's heartbeat, and the lease after which a silent run counts as dead.

While a run is written, a thread of its writer stores `runs.heartbeat_at` every HEARTBEAT_S. A
process killed with SIGKILL stops beating; its pid can be checked only on its own host, and not
at all after a container restart (another process may hold the pid). So a `running` run whose
heartbeat is older than LEASE_S is shown `interrupted`, from any host, and `gate --resume RUN`
may take it over. A live run beats eight times per lease and is never taken over: the takeover
is one conditional UPDATE that fails if the run beat again after it was read.
"""

from __future__ import annotations

import threading
import weakref
from datetime import UTC, datetime, timedelta

from sqlalchemy import Engine, func, update
from sqlalchemy.exc import SQLAlchemyError

from servegate.store import tables

__all__ = ["HEARTBEAT_S", "LEASE_S", "Heartbeat", "beat", "beat_age_s", "lease_over", "now_text"]

HEARTBEAT_S = 15.0
LEASE_S = 120.0  # eight missed beats: a database busy for a minute does not end a live run


def beat_age_s(beat_at: str, now: datetime | None = None) -> float | None:
    """Seconds since the stored heartbeat; None when it does not parse."""
    try:
        then = datetime.fromisoformat(beat_at)
    except (TypeError, ValueError):
        return None
    if then.tzinfo is None:
        then = then.replace(tzinfo=UTC)
    return ((now or datetime.now(UTC)) - then) / timedelta(seconds=1)


def lease_over(beat_at: str | None, now: datetime | None = None) -> bool:
    """The heartbeat is older than the lease (no heartbeat at all tells nothing: False)."""
    if beat_at is None:
        return False
    age = beat_age_s(beat_at, now)
    return age is not None and age > LEASE_S


def now_text() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def beat(engine: Engine, run_id: str, attempt: int) -> bool:
    """Store a heartbeat for `attempt` of the run now; False once the run is no longer that
    attempt's (taken over) or no longer running."""
    runs = tables.runs
    with engine.begin() as conn:
        done = conn.execute(
            update(runs)
            .where(runs.c.id == run_id)
            .where(func.coalesce(runs.c.attempt, 1) == attempt)
            .where(runs.c.state == "running")
            .values(heartbeat_at=now_text())
        )
    return done.rowcount == 1


class Heartbeat:
    """Beats for one attempt of one run until stopped, taken over, or garbage collected."""

    def __init__(self, engine: Engine, run_id: str, attempt: int, every_s: float) -> None:
        self._engine = engine
        self._run_id = run_id
        self._attempt = attempt
        self._stop = threading.Event()
        # The thread holds only a weak reference: a writer dropped without finishing (a test,
        # a crash inside the caller) stops its heartbeat instead of beating forever.
        ref = weakref.ref(self)
        self._thread = threading.Thread(
            target=_beat_until_stopped, args=(ref, self._stop, every_s),
            name=f"servegate-heartbeat-{run_id}", daemon=True,
        )  # fmt: skip
        weakref.finalize(self, self._stop.set)
        self._thread.start()

    def beat(self) -> bool:
        """Store a heartbeat now; False once the run is no longer this attempt's or running."""
        return beat(self._engine, self._run_id, self._attempt)

    def stop(self) -> None:
        self._stop.set()


def _beat_until_stopped(
    ref: weakref.ReferenceType[Heartbeat], stop: threading.Event, every_s: float
) -> None:
    while not stop.wait(every_s):
        heart = ref()
        if heart is None:
            return
        try:
            alive = heart.beat()
        except (SQLAlchemyError, OSError):
            alive = True  # the database is busy or away: try again at the next beat
        except Exception:
            return
        del heart
        if not alive:
            return
