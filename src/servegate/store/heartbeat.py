"""A run's heartbeat, and the lease after which a silent run counts as dead — both on the
database's clock.

While a run is written, a thread of its writer stores `runs.heartbeat_at` every HEARTBEAT_S. A
process killed with SIGKILL stops beating; its pid can be checked only on its own host, and not
at all after a container restart (another process may hold the pid). So a `running` run whose
heartbeat is older than LEASE_S is shown `interrupted`, from any host, and `gate --resume RUN`
may take it over. A live run beats eight times per lease and is never taken over: the takeover
is one conditional UPDATE that fails if the run beat again after it was read.

Whose clock: the database's, for the beat and for the lease check alike, so two hosts whose
clocks differ never compare them (a skew over LEASE_S − HEARTBEAT_S let another host take over a
live run). PostgreSQL: the server's `now()`. SQLite: the clock of the host that holds the file
(a SQLite file is one host's; SQLite itself warns against sharing it over a network filesystem).
Either way a beat never goes backwards: it is the later of the database's now and the previous
beat plus the time the writer's monotonic clock measured since — a wall clock stepped back
(NTP, a VM resumed) cannot make a live run look dead.
"""

from __future__ import annotations

import threading
import time
import weakref
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Connection, Engine, String, func, update
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.functions import FunctionElement

from servegate.store import tables

__all__ = [
    "HEARTBEAT_S",
    "LEASE_S",
    "Heartbeat",
    "beat",
    "beat_age_s",
    "database_now",
    "lease_over",
]

HEARTBEAT_S = 15.0
LEASE_S = 120.0  # eight missed beats: a database busy for a minute does not end a live run
NOW_KEY = "db_now"  # a runs row read with `with_database_now` carries the database's clock


class database_now(FunctionElement[str]):  # named as SQL functions are (func.now)
    """The database's clock as UTC ISO text (`2026-12-03T09:37:47.616+00:00`), the format of
    `heartbeat_at`: PostgreSQL's `now()`, SQLite's `'now'` (the host of the file)."""

    type = String()
    inherit_cache = True


@compiles(database_now, "postgresql")
def _postgresql_now(_element: database_now, _compiler: SQLCompiler, **_kw: Any) -> str:
    return "(to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS') || '+00:00')"


@compiles(database_now)
def _sqlite_now(_element: database_now, _compiler: SQLCompiler, **_kw: Any) -> str:
    return "(strftime('%Y-%m-%dT%H:%M:%f', 'now') || '+00:00')"


def _parse(text: str | None) -> datetime | None:
    try:
        then = datetime.fromisoformat(str(text))
    except (TypeError, ValueError):
        return None
    return then if then.tzinfo is not None else then.replace(tzinfo=UTC)


def beat_age_s(beat_at: str, now: str | datetime | None = None) -> float | None:
    """Seconds from the stored heartbeat to `now` — the database's clock when read with the row
    (`runs.c.db_now`), else this host's; None when it does not parse."""
    then = _parse(beat_at)
    at = now if isinstance(now, datetime) else _parse(now) if now is not None else None
    if then is None:
        return None
    return ((at or datetime.now(UTC)) - then) / timedelta(seconds=1)


def lease_over(beat_at: str | None, now: str | datetime | None = None) -> bool:
    """The heartbeat is older than the lease (no heartbeat at all tells nothing: False)."""
    if beat_at is None:
        return False
    age = beat_age_s(beat_at, now)
    return age is not None and age > LEASE_S


def beat(
    engine: Engine | Connection, run_id: str, attempt: int, floor: str | None = None
) -> str | None:
    """Store a heartbeat for `attempt` of the run: the database's now, or `floor` when that is
    later. The stored text, or None once the run is no longer that attempt's (taken over) or no
    longer running."""
    runs = tables.runs
    value: Any = database_now() if floor is None else _greatest(engine, floor)
    statement = (
        update(runs)
        .where(runs.c.id == run_id)
        .where(func.coalesce(runs.c.attempt, 1) == attempt)
        .where(runs.c.state == "running")
        .values(heartbeat_at=value)
        .returning(runs.c.heartbeat_at)
    )
    if isinstance(engine, Connection):
        row = engine.execute(statement).first()
    else:
        with engine.begin() as conn:
            row = conn.execute(statement).first()
    return None if row is None else str(row[0])


def _greatest(engine: Engine | Connection, floor: str) -> Any:
    name = engine.dialect.name
    return (func.greatest if name == "postgresql" else func.max)(database_now(), floor)


def advanced(text: str, seconds: float) -> str:
    """A heartbeat text moved on by `seconds`."""
    then = _parse(text) or datetime.now(UTC)
    return (then + timedelta(seconds=seconds)).astimezone(UTC).isoformat(timespec="milliseconds")


class Heartbeat:
    """Beats for one attempt of one run until stopped, taken over, or garbage collected."""

    def __init__(
        self, engine: Engine, run_id: str, attempt: int, every_s: float, last: str | None = None
    ) -> None:
        self._engine = engine
        self._run_id = run_id
        self._attempt = attempt
        # The last beat stored and when (this process's monotonic clock): the next beat is
        # never earlier than it plus the time since.
        self._last = last
        self._last_mono = time.monotonic()
        self._lock = threading.Lock()
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
        with self._lock:  # the thread and an explicit beat never interleave their floors
            mono = time.monotonic()
            floor = None if self._last is None else advanced(self._last, mono - self._last_mono)
            stored = beat(self._engine, self._run_id, self._attempt, floor)
            if stored is not None:
                self._last, self._last_mono = stored, mono
            return stored is not None

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
