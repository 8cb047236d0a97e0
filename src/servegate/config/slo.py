"""Service-level objectives for goodput: `ttft_ms=500,tpot_ms=50,e2el_ms=5000`, parsed strictly.

An SLO is user input (`servegate bench --slo`, the gate's `performance.slo`), so it lives in the
config layer, which every other layer may import; `servegate.load.slo` re-exports it.
"""

from __future__ import annotations

import math
import re

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["SLO", "SLO_KEYS", "SLOError", "parse_slo"]

SLO_KEYS = ("ttft_ms", "tpot_ms", "e2el_ms")


class SLOError(ValueError):
    """An SLO string that does not parse; the message is one line naming the problem."""

    exit_code = 2


class SLO(BaseModel):
    """Upper bounds a request must meet to count towards goodput; None = no bound."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    ttft_ms: float | None = Field(default=None, gt=0)
    tpot_ms: float | None = Field(default=None, gt=0)
    e2el_ms: float | None = Field(default=None, gt=0)

    def met(self, ttft_ms: float | None, tpot_ms: float | None, e2el_ms: float | None) -> bool:
        """Whether one successful request meets every bound. A request with one output token has
        no TPOT and meets a TPOT bound vacuously; a missing TTFT or E2EL never meets one."""
        if self.ttft_ms is not None and (ttft_ms is None or ttft_ms > self.ttft_ms):
            return False
        if self.tpot_ms is not None and tpot_ms is not None and tpot_ms > self.tpot_ms:
            return False
        return self.e2el_ms is None or (e2el_ms is not None and e2el_ms <= self.e2el_ms)

    def describe(self) -> str:
        """`ttft_ms=500,tpot_ms=50` — the form `parse_slo` reads."""
        return ",".join(
            f"{key}={value:g}" for key in SLO_KEYS if (value := getattr(self, key)) is not None
        )


def parse_slo(text: str) -> SLO:
    """`key=value` pairs separated by commas or spaces; keys ttft_ms, tpot_ms, e2el_ms; values
    positive finite milliseconds; each key at most once and at least one key."""
    parts = [p for p in re.split(r"[,\s]+", text.strip()) if p]
    if not parts:
        raise SLOError("empty SLO; expected e.g. ttft_ms=500,tpot_ms=50,e2el_ms=5000")
    values: dict[str, float] = {}
    for part in parts:
        key, sep, raw = part.partition("=")
        key = key.strip()
        if not sep:
            raise SLOError(f"{part!r} is not key=value (expected e.g. ttft_ms=500)")
        if key not in SLO_KEYS:
            raise SLOError(f"unknown SLO key {key!r}; expected {', '.join(SLO_KEYS)}")
        if key in values:
            raise SLOError(f"SLO key {key} given twice")
        try:
            value = float(raw)
        except ValueError:
            raise SLOError(f"{key}={raw!r}: not a number of milliseconds") from None
        if not math.isfinite(value) or value <= 0:
            raise SLOError(f"{key}={raw}: must be a positive, finite number of milliseconds")
        values[key] = value
    return SLO(**values)
