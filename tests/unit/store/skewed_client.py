"""A servegate store client on a host whose clock is off: run with the skew shim preloaded
(`LD_PRELOAD=skewclock.so SKEW_S=-300`).

    python skewed_client.py write DB BEAT_S [STEP_AFTER_S STEP_TO_S]
        start a run that beats every BEAT_S; print its id; after STEP_AFTER_S set this
        process's clock to STEP_TO_S seconds off (print "stepped"); beat until killed
    python skewed_client.py read DB RUN_ID
        print the run's shown state, then "resumable" or the refusal of `gate --resume`
"""

from __future__ import annotations

import os
import sys
import time

from servegate.store.errors import StoreError
from servegate.store.process import shown_state
from servegate.store.reader import find_run
from servegate.store.resume import load_resume_point
from servegate.store.writer import RunWriter, open_engine


def write(db: str, beat_s: float, step_after_s: float | None, step_to_s: str | None) -> None:
    engine = open_engine(db)
    writer = RunWriter.start(engine, baseline_url="http://b/v1", candidate_url="http://c/v1",
                             model="m", config={}, heartbeat_s=beat_s)  # fmt: skip
    print(writer.run_id, flush=True)
    began = time.monotonic()
    while True:
        time.sleep(0.05)
        if step_after_s is not None and time.monotonic() - began >= step_after_s:
            os.environ["SKEW_S"] = str(step_to_s)
            step_after_s = None
            print("stepped", flush=True)


def read(db: str, run_id: str) -> None:
    engine = open_engine(db)
    print(shown_state(find_run(engine, run_id)))
    try:
        load_resume_point(engine, run_id)
    except StoreError as exc:
        print(exc)
    else:
        print("resumable")


if __name__ == "__main__":
    action, db = sys.argv[1], sys.argv[2]
    if action == "write":
        step = sys.argv[4:6]
        write(db, float(sys.argv[3]), float(step[0]) if step else None, step[1] if step else None)
    else:
        read(db, sys.argv[3])
