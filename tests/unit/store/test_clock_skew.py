"""FAULTS 66: hosts whose clocks differ share a store. A live run's lease is never taken over,
a dead one's is, after the documented lease — judged on the database's clock.

A skewed host is a real process whose wall clock reads five minutes off: servegate's own store
code under a small LD_PRELOAD shim (`skewclock.c`, built here with the system C compiler) that
shifts CLOCK_REALTIME, gettimeofday and time(). PostgreSQL's clock is its server's: a writer or
a reader with any skew is covered. A SQLite file has one host and so one clock; what can still
happen there is that clock stepping (NTP, a resumed VM), tested on both databases.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from sqlalchemy import Engine

from servegate.store.errors import StoreError
from servegate.store.heartbeat import LEASE_S
from servegate.store.process import shown_state
from servegate.store.reader import find_run
from servegate.store.resume import load_resume_point
from servegate.store.writer import RunWriter

from .conftest import execute

HERE = Path(__file__).parent
SRC = Path(__file__).resolve().parents[3] / "src"
SKEW_S = 300  # five minutes: 2.5 leases
BEAT_S = 0.2


@pytest.fixture(scope="session")
def shim(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """skewclock.so, built once, and proven to move a Python process's clock."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.fail("no C compiler (cc/gcc) to build the clock-skew shim")
    out = tmp_path_factory.mktemp("skew") / "skewclock.so"
    subprocess.run([cc, "-shared", "-fPIC", "-O2", "-o", str(out), str(HERE / "skewclock.c"),
                    "-ldl"], check=True, capture_output=True, timeout=120)  # fmt: skip
    shown = subprocess.run(
        [sys.executable, "-c", "import time; print(time.time())"],
        env=_env(out, -SKEW_S), capture_output=True, text=True, check=True, timeout=30,
    )  # fmt: skip
    assert abs(float(shown.stdout) - (time.time() - SKEW_S)) < 30
    return out


def _env(shim: Path, skew_s: float) -> dict[str, str]:
    path = f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"
    return {**os.environ, "LD_PRELOAD": str(shim), "SKEW_S": str(skew_s), "PYTHONPATH": path}


@contextmanager
def _writer(
    shim: Path, db: str, skew_s: float, step: tuple[float, float] | None = None
) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """A run written and beating from a skewed host; killed (SIGKILL) when the block ends."""
    argv = [sys.executable, str(HERE / "skewed_client.py"), "write", db, str(BEAT_S)]
    argv += [] if step is None else [str(step[0]), str(step[1])]
    child = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, env=_env(shim, skew_s))
    try:
        assert child.stdout is not None
        run_id = child.stdout.readline().strip()
        assert run_id, "the skewed writer did not start its run"
        if step is not None:
            assert child.stdout.readline().strip() == "stepped"
        time.sleep(10 * BEAT_S)  # beats written on the skewed (or stepped) clock
        yield run_id, child
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
        if child.stdout is not None:
            child.stdout.close()


def _assert_live(engine: Engine, run_id: str) -> None:
    assert shown_state(find_run(engine, run_id)) == "running"
    with pytest.raises(StoreError, match="still running"):
        load_resume_point(engine, run_id)
    with pytest.raises(StoreError, match="still running"):
        RunWriter.resume(engine, run_id, 2)


def _age_on_the_database_clock(db: str, run_id: str, seconds: float) -> None:
    """What a writer killed `seconds` ago leaves: its last beat, on the database's own clock."""
    if "://" in db:
        then = (f"to_char((now() - interval '{seconds} seconds') AT TIME ZONE 'UTC', "
                "'YYYY-MM-DD\"T\"HH24:MI:SS.MS') || '+00:00'")  # fmt: skip
    else:
        then = f"strftime('%Y-%m-%dT%H:%M:%f', 'now', '-{seconds} seconds') || '+00:00'"
    execute(db, f"update runs set heartbeat_at = {then}, hostname = 'gone' where id = '{run_id}'")


def test_a_writer_whose_clock_steps_back_five_minutes_keeps_its_run(
    shim: Path, engine: Engine, store_url: str
) -> None:
    with _writer(shim, store_url, 0, step=(3 * BEAT_S, -SKEW_S)) as (run_id, _):
        _assert_live(engine, run_id)
    # Killed: once its last beat is older than the lease on the database's clock, it is taken.
    _age_on_the_database_clock(store_url, run_id, LEASE_S + 5)
    point = load_resume_point(engine, run_id)
    RunWriter.resume(engine, run_id, point.attempt).crashed("test over")


@pytest.mark.parametrize("skew_s", [-SKEW_S, SKEW_S], ids=["behind", "ahead"])
def test_a_writer_on_a_host_five_minutes_off_keeps_its_run_on_postgresql(
    shim: Path, postgres_url: str, skew_s: int
) -> None:
    from servegate.store.writer import open_engine

    engine = open_engine(postgres_url)
    try:
        with _writer(shim, postgres_url, skew_s) as (run_id, _):
            _assert_live(engine, run_id)
        _age_on_the_database_clock(postgres_url, run_id, LEASE_S + 5)
        assert load_resume_point(engine, run_id).attempt == 2
    finally:
        engine.dispose()


def test_a_reader_on_a_host_five_minutes_ahead_never_takes_over_a_live_run_on_postgresql(
    shim: Path, postgres_url: str
) -> None:
    with _writer(shim, postgres_url, 0) as (run_id, _):
        read = subprocess.run(
            [sys.executable, str(HERE / "skewed_client.py"), "read", postgres_url, run_id],
            env=_env(shim, SKEW_S), capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
    assert read.returncode == 0, read.stderr
    state, verdict = read.stdout.strip().splitlines()
    assert state == "running"
    assert "still running" in verdict
