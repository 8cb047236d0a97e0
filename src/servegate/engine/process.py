"""Child processes that never outlive their owner: own session, death signal, orderly stop.

A child runs in its own session and process group (Ctrl-C reaches only the parent, which stops
it in order) and gets SIGTERM from the kernel if the thread that started it dies
(PR_SET_PDEATHSIG). The death signal follows the starting *thread*: spawn from a long-lived
thread such as the main thread, never from a worker thread that ends.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

_PR_SET_PDEATHSIG = 1


def free_port() -> int:
    """A TCP port on 127.0.0.1 that the OS reports free right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _die_with_parent(parent_pid: int) -> None:
    # Runs in the child between fork and exec; the death signal survives exec.
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os._exit(1)


def spawn(
    argv: Sequence[str],
    log_path: Path,
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> subprocess.Popen[bytes]:
    """Start `argv` in its own session (pid = process group id), stdout and stderr appended to
    `log_path`, with SIGTERM on the parent's death. Raises OSError when it cannot be executed."""
    parent_pid = os.getpid()
    with log_path.open("ab") as log:
        return subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=dict(env) if env is not None else None,
            cwd=cwd,
            preexec_fn=lambda: _die_with_parent(parent_pid),
        )


def stop(process: subprocess.Popen[bytes], grace_s: float) -> None:
    """SIGTERM the process, SIGKILL after `grace_s`; safe to call twice."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def group_alive(pgid: int) -> bool:
    """True while any process of group `pgid` exists (an unreaped zombie counts)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stop_group(process: subprocess.Popen[bytes], grace_s: float) -> None:
    """SIGTERM the process group `process` leads, SIGKILL what is left of it after `grace_s`,
    and reap the leader: a server's workers go with it. Safe to call twice."""
    pgid = process.pid  # spawn() starts a new session: the leader's pid is the group id
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        process.poll()  # reaps the leader, so a finished group reads as gone
        if not group_alive(pgid):
            return
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)
    process.wait()


def log_tail(path: Path, lines: int = 30) -> str:
    """The last `lines` lines of a log file, or "(no log)"."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])
