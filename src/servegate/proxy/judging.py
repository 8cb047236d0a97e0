"""Mirrored pairs compared off the event loop. Reading both answers with the SSE parser and
comparing them takes milliseconds of CPU; done on the event loop, it delays every other user's
next chunk by that much. A thread does it instead, behind a small bounded queue; when the queue
is full the pair is compared at once on the caller's thread, as before, so every pair is still
compared and counted and what waits stays bounded."""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable

log = logging.getLogger("servegate.proxy")

# While the judge's thread (or the record writer's) runs Python, the event loop waits for the
# GIL up to the interpreter's switch interval (5 ms by default) each time a chunk wakes it; that
# wait lands on a user's stream. The proxy's process asks for a hand-over within 0.5 ms,
# a quarter of the 2 ms the proxy may add at p99 (issue 11).
SWITCH_INTERVAL_S = 0.0005

Judgement = Callable[[], None]


class PairJudge:
    """`submit` from the event loop; a thread runs each judgement. `close` runs what is queued,
    then stops. `done` counts judgements finished (on either thread)."""

    def __init__(self, *, size: int) -> None:
        self._queue: queue.Queue[Judgement | None] = queue.Queue(maxsize=size)
        self._lock = threading.Lock()
        self.done = 0
        self.inline = 0  # judged on the caller's thread: the queue was full
        self._thread = threading.Thread(target=self._run, name="servegate-proxy-judge")
        self._thread.daemon = True
        self._thread.start()

    def submit(self, judgement: Judgement) -> None:
        """Queue a judgement without blocking; a full queue runs it here and now."""
        try:
            self._queue.put_nowait(judgement)
        except queue.Full:
            with self._lock:
                self.inline += 1
            self._judge(judgement)

    def close(self) -> None:
        """Run what is queued, then stop the thread."""
        self._queue.put(None)
        self._thread.join()

    def _run(self) -> None:
        while True:
            judgement = self._queue.get()
            if judgement is None:
                return
            self._judge(judgement)

    def _judge(self, judgement: Judgement) -> None:
        try:
            judgement()
        except Exception:  # a comparison that fails is a bug to see, never a reason to stop
            log.exception("servegate proxy: a mirrored pair could not be compared")
        finally:
            with self._lock:
                self.done += 1
