"""Bounds on what the proxy holds and forwards: how many request bodies it reads at once and for
how long it waits for one, how many requests it serves at once and the bytes they hold, the
bytes all its queues may hold together, and which request paths may reach an upstream at all.

A body is buffered whole before it is forwarded (the mirror and the measurement need it), and up
to `record_bytes` of each answer is kept to measure it. The requests in flight (at most
`max_in_flight`) hold at most `max_buffered_bytes` of bodies and kept answers together; what
waits after them in the mirror and record queues, at most `max_queued_bytes`; an inflated answer
at most MAX_DECODED_BYTES while it is read (`exchange.py`), one per reading thread. Memory is
bounded by the sum of these and a few KiB per request in flight."""

from __future__ import annotations

import threading
from urllib.parse import unquote_to_bytes


class ByteBudget:
    """Bytes held across queues, shared by the event loop and the writer thread."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._held = 0
        self._lock = threading.Lock()

    @property
    def held(self) -> int:
        return self._held

    def take(self, size: int) -> bool:
        """Reserve `size` bytes; False (nothing reserved) when that would pass the limit."""
        with self._lock:
            if self._held + size > self.limit:
                return False
            self._held += size
            return True

    def give(self, size: int) -> None:
        """Return bytes reserved with `take`."""
        with self._lock:
            self._held = max(0, self._held - size)


# Encoded separators: a second decode upstream would turn them into `/` or `\`.
_ENCODED_SEPARATORS = (b"%2f", b"%5c")


def path_escape(raw_path: bytes) -> str | None:
    """Why `raw_path` could leave the upstream's configured prefix, or None when it cannot:
    a `.` or `..` segment (also percent-encoded, `%2e%2e`), an encoded `/` or `\\`, or a
    backslash."""
    lowered = raw_path.lower()
    if any(sep in lowered for sep in _ENCODED_SEPARATORS) or b"\\" in raw_path:
        return "an encoded or backslash path separator"
    decoded = unquote_to_bytes(raw_path)
    if any(segment in (b".", b"..") for segment in decoded.split(b"/")):
        return "a '.' or '..' path segment"
    return None
