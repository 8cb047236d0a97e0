"""Child processes that never outlive their owner: a guard per engine, its own session, an
orderly stop.

`spawn` starts a guard (`servegate/engine/guard.py`) as the leader of a new session and process
group, and the engine as the guard's child in that group; everything the engine starts joins it.
Ctrl-C reaches only servegate, which stops the group in order (`stop_group`). When servegate dies
— SIGKILL included, whichever thread spawned — a pipe only servegate holds closes, and the guard
stops the whole group: the engine and every worker it started. The death signal this replaced
(PR_SET_PDEATHSIG on the engine alone) reached only the engine's main process, so a worker the
engine did not stop itself outlived servegate (issue 29).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import weakref
from collections.abc import Mapping, Sequence
from pathlib import Path

GUARD = Path(__file__).with_name("guard.py")
DEFAULT_GRACE_S = 10.0


def free_port() -> int:
    """A TCP port on 127.0.0.1 that the OS reports free right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class GuardedProcess(subprocess.Popen[bytes]):
    """The guard of one engine (its pid is the group id); holds the pipe whose end tells the
    guard that servegate is gone."""

    owner_fd: int = -1
    _release: weakref.finalize[[int], GuardedProcess] | None = None

    def release(self) -> None:
        """Close servegate's end of the owner pipe (the guard then stops what is left)."""
        if self._release is not None:
            self._release()


def spawn(
    argv: Sequence[str],
    log_path: Path,
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    grace_s: float = DEFAULT_GRACE_S,
) -> subprocess.Popen[bytes]:
    """Start `argv` under a guard in a new session (the guard's pid is the process group id),
    stdout and stderr appended to `log_path`. The group is stopped (SIGTERM, SIGKILL after
    `grace_s`) when servegate dies. Raises OSError when `argv` cannot be executed."""
    owner_read, owner_write = os.pipe()
    status_read, status_write = os.pipe()
    try:
        with log_path.open("ab") as log:
            process = GuardedProcess(
                [sys.executable, "-I", "-S", str(GUARD), str(owner_read), str(status_write),
                 f"{grace_s:g}", "--", *argv],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True, env=dict(env) if env is not None else None, cwd=cwd,
                pass_fds=(owner_read, status_write),
            )  # fmt: skip
    except BaseException:
        os.close(owner_write)
        raise
    finally:
        os.close(owner_read)
        os.close(status_write)
    process.owner_fd = owner_write
    process._release = weakref.finalize(process, os.close, owner_write)
    with os.fdopen(status_read, "rb") as status:
        started = status.readline().strip()
    if started != b"0":
        process.wait()
        process.release()
        code = int(started or 0) or None
        raise OSError(code, os.strerror(code) if code else "the guard did not start it")
    return process


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
    and reap the leader: a server's workers go with it. Safe to call twice. Blocks for up to
    `grace_s`: from a running event loop, call it in a thread."""
    pgid = process.pid  # spawn() starts a new session: the leader's pid is the group id
    try:
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
    finally:
        if isinstance(process, GuardedProcess):
            process.release()


def log_tail(path: Path, lines: int = 30) -> str:
    """The last `lines` lines of a log file, or "(no log)"."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])
