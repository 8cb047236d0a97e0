"""Which state `servegate runs` shows for a stored row: a `running` run with no process is
`interrupted`; anything the reader cannot check is shown as stored."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import pytest

from servegate.store.process import pid_alive, shown_state

HERE = "gate-host"
LIVE_PID, DEAD_PID = 100, 200


@pytest.mark.parametrize(
    ("row", "shown"),
    [
        ({"state": "running", "pid": DEAD_PID, "hostname": HERE}, "interrupted"),
        ({"state": "running", "pid": LIVE_PID, "hostname": HERE}, "running"),
        ({"state": "running", "pid": DEAD_PID, "hostname": "other-host"}, "running"),
        ({"state": "running", "pid": None, "hostname": None}, "running"),
        ({"state": "crashed", "pid": DEAD_PID, "hostname": HERE}, "crashed"),
        ({"state": "finished", "pid": DEAD_PID, "hostname": HERE}, "finished"),
    ],
    ids=[
        "killed-here",
        "alive-here",
        "another-host-cannot-be-checked",
        "written-before-pids-were-stored",
        "crashed-stays-crashed",
        "finished-stays-finished",
    ],
)
def test_shown_state(row: dict[str, Any], shown: str) -> None:
    assert shown_state(row, host=HERE, alive=lambda pid: pid == LIVE_PID) == shown


def test_a_reaped_child_is_not_alive_and_this_process_is() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert not pid_alive(child.pid)
    assert pid_alive(os.getpid())
