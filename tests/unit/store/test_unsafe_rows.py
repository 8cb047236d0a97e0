"""FAULTS 51: a row whose stored JSON was replaced by a pickle (a tampered database, or one an
attacker can write to) is refused with one line; the payload is never run."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import pytest
from sqlalchemy import Engine, text

from servegate.store.errors import StoreError
from servegate.store.reader import stored_report
from servegate.store.writer import RunWriter


class _Payload:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.system, (f"touch {self.marker}",))


def test_a_pickled_report_in_the_store_is_refused_and_never_run(
    engine: Engine, tmp_path: Path
) -> None:
    marker = tmp_path / "ran"
    payload = pickle.dumps(_Payload(marker), protocol=0).decode("latin-1")
    writer = RunWriter.start(engine, baseline_url="http://b/v1", candidate_url="http://c/v1",
                             model="m", config={})  # fmt: skip
    writer.stop_heartbeat()
    with engine.begin() as conn:
        conn.execute(
            text("update runs set state = 'finished', report_json = :p where id = :i"),
            {"p": payload, "i": writer.run_id},
        )
    with pytest.raises(StoreError, match="cannot be read by this version"):
        stored_report(engine, writer.run_id)
    assert not marker.exists()
