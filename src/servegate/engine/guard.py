"""The guard of one engine: leads its process group, runs the engine in it, and stops the whole
group when servegate is gone — however servegate ended, SIGKILL included.

`python guard.py OWNER_FD STATUS_FD GRACE_S -- COMMAND...` (started by `process.spawn`, which
makes it a session and process-group leader). The engine is its child, in its group, with its
output; every process the engine starts (vLLM's engine core and workers) joins the group too.

- Whether servegate lives: OWNER_FD is the read end of a pipe whose only write end servegate
  holds. The kernel closes it when servegate dies, for any reason, from any thread — the death
  signal (PR_SET_PDEATHSIG) reaches only a direct child and follows the thread that forked it.
- servegate gone, or the engine ended: the rest of the group gets SIGTERM, then SIGKILL after
  GRACE_S; the guard ends last with the engine's own exit status (a signal is re-raised).
- A SIGTERM, SIGINT or SIGHUP to the guard itself is ignored: servegate signals the whole group
  (`process.stop_group`), and the engine answers for itself.

It imports only the standard library (it runs as `python -I -S guard.py`), so it starts in tens
of milliseconds and holds a few MiB.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

POLL_S = 0.05


def group_members(pgid: int, proc: Path = Path("/proc")) -> list[int]:
    """Live processes of group `pgid`, zombies left out."""
    members = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 2 and fields[0] != "Z" and int(fields[2]) == pgid:
            members.append(int(entry.name))
    return members


def stop_others(grace_s: float) -> None:
    """SIGTERM every other process of this group, SIGKILL what is left after `grace_s`."""
    me, pgid = os.getpid(), os.getpgid(0)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGTERM)  # ignored by the guard itself
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if not [pid for pid in group_members(pgid) if pid != me]:
            return
        time.sleep(POLL_S)
    for pid in group_members(pgid):
        if pid != me:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def _watch_owner(owner_fd: int, gone: threading.Event) -> None:
    try:
        while os.read(owner_fd, 4096):
            pass
    except OSError:
        pass
    gone.set()


def main(argv: list[str]) -> int:
    owner_fd, status_fd, grace_s = int(argv[0]), int(argv[1]), float(argv[2])
    command = argv[4:]
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda *_: None)  # a handler, not SIG_IGN: exec resets it
    try:
        engine = subprocess.Popen(command)
    except OSError as exc:
        os.write(status_fd, f"{exc.errno or 0}\n".encode())
        return 127
    os.write(status_fd, b"0\n")
    os.close(status_fd)
    owner_gone = threading.Event()
    threading.Thread(target=_watch_owner, args=(owner_fd, owner_gone), daemon=True).start()
    while engine.poll() is None:
        if owner_gone.wait(POLL_S):
            stop_others(grace_s)
            engine.wait()
    stop_others(grace_s)  # what the engine left behind (workers that outlive their leader)
    code = engine.returncode
    if code < 0:
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
        time.sleep(1)
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
