"""Which process is writing a run, and whether a run still marked `running` has lost it.

A run killed with SIGKILL (or by a power cut) cannot mark itself; its row stays `running`. The
row holds the writer's pid and hostname, so a reader on the same host can tell that the process
is gone and show the run as `interrupted`. On another host, or for rows written before pids were
recorded, the heartbeat tells (store/heartbeat.py): once it is older than the lease the run is
shown `interrupted` from any host; a run without one is shown as stored.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Mapping
from typing import Any

from servegate.store.heartbeat import NOW_KEY, lease_over


def hostname() -> str:
    """This host's name, as stored with each run."""
    return socket.gethostname()


def pid_alive(pid: int) -> bool:
    """Is a process with this pid running on this host (signal 0 checks without sending)?"""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # it exists, owned by someone else
    except (OverflowError, ValueError):
        return False
    return True


def shown_state(
    row: Mapping[str, Any],
    *,
    host: str | None = None,
    alive: Callable[[int], bool] = pid_alive,
) -> str:
    """The state to show for a runs row: `interrupted` for a `running` run whose process on this
    host is gone, or whose heartbeat is older than the lease (any host: a pid cannot be checked
    elsewhere, nor trusted after a container restart) on the database's clock, read with the row
    (`db_now`); otherwise the stored state."""
    state = str(row["state"])
    if state != "running":
        return state
    if lease_over(row.get("heartbeat_at"), row.get(NOW_KEY)):
        return "interrupted"
    pid, row_host = row.get("pid"), row.get("hostname")
    if pid is None or row_host is None:
        return state
    if row_host != (hostname() if host is None else host):
        return state
    return state if alive(int(pid)) else "interrupted"
