"""A recorded traffic file: one OpenAI request body per JSONL line, optional `timestamp` each.

Read whole and checked before anything is sent, so a broken line stops the run with one line
naming the file and the line, and nothing is written. `timestamp` is seconds (a number) or an
ISO-8601 string; either every request line has one or none does, and they never go backwards.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

__all__ = ["ReplayError", "ReplayTraffic", "read_replay"]

TIMESTAMP = "timestamp"


class ReplayError(ValueError):
    """A replay file that cannot be used; the message names the file and, where known, the line."""

    exit_code = 2


@dataclass(frozen=True, slots=True)
class ReplayTraffic:
    """Request bodies in file order (without `timestamp`) and their offsets from the first."""

    path: str
    sha256: str
    bodies: tuple[dict[str, Any], ...]
    line_numbers: tuple[int, ...]
    offsets_s: tuple[float, ...] | None  # None when the file has no timestamps


def _timestamp(value: Any) -> float:
    if isinstance(value, bool):
        raise ValueError("timestamp must be seconds (a number) or an ISO-8601 string")
    if isinstance(value, int | float):
        if not math.isfinite(value):
            raise ValueError("timestamp is not finite")
        return float(value)
    if isinstance(value, str):
        try:
            when = datetime.fromisoformat(value)
        except ValueError:
            raise ValueError(f"timestamp {value!r} is not ISO-8601") from None
        return when.timestamp()
    raise ValueError("timestamp must be seconds (a number) or an ISO-8601 string")


def _body(line: str) -> tuple[dict[str, Any], float | None]:
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON: {exc.msg} at column {exc.colno}") from None
    if not isinstance(obj, dict):
        raise ValueError("not a JSON object (one OpenAI request body per line)")
    if not isinstance(obj.get("messages"), list) and "prompt" not in obj:
        raise ValueError("neither 'messages' (chat) nor 'prompt' (completions)")
    stamp = _timestamp(obj.pop(TIMESTAMP)) if TIMESTAMP in obj else None
    return obj, stamp


def read_replay(path: Path) -> ReplayTraffic:
    """Parse and check the whole file; raises ReplayError naming the first bad line."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ReplayError(f"replay file {path}: cannot read: {exc.strerror or exc}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ReplayError(f"replay file {path}: not UTF-8 text: {exc.reason}") from None
    bodies: list[dict[str, Any]] = []
    numbers: list[int] = []
    stamps: list[float | None] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            body, stamp = _body(line)
        except ValueError as exc:
            raise ReplayError(f"{path}:{number}: {exc}") from None
        if stamps and (stamp is None) != (stamps[0] is None):
            raise ReplayError(
                f"{path}:{number}: 'timestamp' on some lines only (line {numbers[0]} "
                f"{'has' if stamps[0] is not None else 'has none'}); give it on every line or none"
            )
        previous = stamps[-1] if stamps else None
        if stamp is not None and previous is not None and stamp < previous:
            raise ReplayError(f"{path}:{number}: timestamp goes back in time")
        bodies.append(body)
        numbers.append(number)
        stamps.append(stamp)
    if not bodies:
        raise ReplayError(f"replay file {path}: no requests (empty or only blank lines)")
    offsets = None
    if stamps[0] is not None:
        first = stamps[0]
        offsets = tuple(float(s) - first for s in stamps if s is not None)
    return ReplayTraffic(
        path=str(path),
        sha256=hashlib.sha256(data).hexdigest(),
        bodies=tuple(bodies),
        line_numbers=tuple(numbers),
        offsets_s=offsets,
    )
