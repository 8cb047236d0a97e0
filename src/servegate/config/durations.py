"""Durations as people write them on a command line: `300`, `60s`, `2m`, `500ms`, `4m30s`."""

from __future__ import annotations

import re

__all__ = ["duration_seconds"]

_NUMBER = re.compile(r"\s*(\d+(?:\.\d+)?)\s*")
_PARTS = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(ms|h|m|s)\s*")
_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def duration_seconds(text: str) -> float | None:
    """The seconds `text` names — a number of seconds, or numbers each with a unit (ms, s, m,
    h) — or None when it names no duration."""
    if bare := _NUMBER.fullmatch(text):
        return float(bare.group(1))
    if not text.strip() or _PARTS.sub("", text):
        return None
    return sum(float(n) * _SECONDS[unit] for n, unit in _PARTS.findall(text))
