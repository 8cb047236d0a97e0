"""Pairs and captures written off the event loop: a bounded queue drained by one thread, which
redacts every record before it goes to the store or the capture file. A full queue drops the
record (counted) rather than slow a user's request.

What of prompts and answers is written is the proxy's `store_bodies`: `none` (the default: the
request's and answers' bodies are left out, the comparison, statuses and timings kept),
`redacted` (key-like strings and secret fields replaced) or `full`. Headers are always redacted.
The thread also deletes stored pairs older than the retention, at start and every hour."""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import IO, Any

from servegate.proxy.comparison import ANSWER_WORDS
from servegate.proxy.limits import ByteBudget
from servegate.proxy.redaction import redact_headers, redact_value
from servegate.proxy.settings import StoreBodies
from servegate.store.errors import StoreError
from servegate.store.proxy_records import ProxyRecorder

log = logging.getLogger("servegate.proxy")
RECORD_CHARS = 65_536  # of each answer's body, as Exchange.as_record keeps it
PRUNE_EVERY_S = 3600.0


@dataclass(frozen=True)
class Record:
    """One request for the capture file, and when it was mirrored, its pair for the store."""

    path: str
    request: Any  # the parsed JSON body (or its text when it did not parse)
    headers: tuple[tuple[str, str], ...]
    primary: Mapping[str, Any] | None = None
    candidate: Mapping[str, Any] | None = None
    comparison: Mapping[str, Any] | None = None
    pair: bool = False  # written to the store (a sampled request), else only captured
    size: int = 0  # bytes it holds, about: counted against the queues' byte cap


def request_value(body: bytes) -> Any:
    """The body as JSON when it parses, else as text: what a record keeps of a request."""
    try:
        return json.loads(body)
    except ValueError:
        return body.decode("utf-8", "replace")


class RecordSink:
    """`put` from the event loop; a thread writes. `close` drains what was queued, then stops."""

    def __init__(
        self,
        recorder: ProxyRecorder | None,
        capture: Path | None,
        *,
        size: int,
        on_drop: Callable[[], None],
        budget: ByteBudget | None = None,
        bodies: StoreBodies = "none",
        retention_s: float | None = None,
    ) -> None:
        self._recorder = recorder
        self._capture: IO[str] | None = None
        if capture is not None:
            self._capture = capture.open("a", encoding="utf-8")
        self._queue: queue.Queue[Record | None] = queue.Queue(maxsize=size)
        self._on_drop = on_drop
        self._budget = budget
        self._bodies = bodies
        self._retention_s = retention_s
        self._pruned_at = float("-inf")
        self.failures = 0
        self.written = 0
        self._thread = threading.Thread(target=self._run, name="servegate-proxy-records")
        self._thread.daemon = True
        self._thread.start()

    @property
    def pending(self) -> int:
        """Records queued or being written."""
        return self._queue.unfinished_tasks

    @property
    def wanted(self) -> bool:
        return self._recorder is not None or self._capture is not None

    def put(self, record: Record) -> None:
        """Queue a record without blocking; a full queue drops it."""
        if not self.wanted:
            return
        if self._budget is not None and not self._budget.take(record.size):
            self._on_drop()
            return
        try:
            self._queue.put_nowait(record)
        except queue.Full:
            if self._budget is not None:
                self._budget.give(record.size)
            self._on_drop()

    def close(self) -> None:
        """Write what is queued, then stop the thread and close the capture file."""
        self._queue.put(None)
        self._thread.join()
        if self._capture is not None:
            self._capture.close()

    def _prune(self) -> None:
        """Delete stored pairs older than the retention (every hour at most)."""
        if self._recorder is None or self._retention_s is None:
            return
        now = time.monotonic()
        if now - self._pruned_at < PRUNE_EVERY_S:
            return
        self._pruned_at = now
        cutoff = datetime.now(UTC) - timedelta(seconds=self._retention_s)
        try:
            deleted = self._recorder.prune(cutoff.isoformat(timespec="milliseconds"))
        except StoreError as exc:
            log.error("servegate proxy: old pairs not deleted: %s", exc)
            return
        if deleted:
            log.info("servegate proxy: deleted %d pairs older than the retention", deleted)

    def _run(self) -> None:
        self._prune()
        while True:
            self._prune()
            record = self._queue.get()
            if record is None:
                self._queue.task_done()
                return
            try:
                self._write(record)
                self.written += 1
            except (StoreError, OSError) as exc:
                self.failures += 1
                if self.failures == 1 or self.failures % 1000 == 0:
                    log.error(
                        "servegate proxy: record not written (%d so far): %s", self.failures, exc
                    )
            finally:
                if self._budget is not None:
                    self._budget.give(record.size)
                self._queue.task_done()

    def _body(self, value: Any) -> Any:
        if self._bodies == "none":
            return None
        return value if self._bodies == "full" else redact_value(value)

    def _answer(self, answer: Mapping[str, Any]) -> dict[str, Any]:
        kept = {k: v for k, v in answer.items() if k != "body"}
        return {**redact_value(kept), "body": self._body(answer.get("body"))}

    def _comparison(self, comparison: Mapping[str, Any]) -> dict[str, Any]:
        """The comparison, its quotes of the answers' words kept only as the bodies are."""
        kept = {k: self._body(v) if k in ANSWER_WORDS else v for k, v in comparison.items()}
        return dict(redact_value(kept))

    def _write(self, record: Record) -> None:
        request = self._body(record.request)
        headers = redact_headers(record.headers)
        if self._capture is not None:
            line = {"path": record.path, "headers": headers, "request": request}
            self._capture.write(json.dumps(line, ensure_ascii=True) + "\n")
            self._capture.flush()
        if record.pair and self._recorder is not None:
            self._recorder.write_pair(
                record.path,
                {"headers": headers, "body": request},
                self._answer(record.primary or {}),
                None if record.candidate is None else self._answer(record.candidate),
                None if record.comparison is None else self._comparison(record.comparison),
            )
