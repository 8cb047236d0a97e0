"""Arrival processes: when each request of a step is sent.

- closed loop: `concurrency` streams, each sending its next request as soon as the last ends;
- open loop: requests at a mean `rate_rps`, gaps drawn from an exponential distribution
  (Poisson arrivals) or a gamma distribution with shape `burstiness` and the same mean (as in
  `vllm bench serve`: burstiness 1 is Poisson, below 1 burstier, above 1 more regular);
- ramp: open loop whose rate moves linearly from `rate_rps` to `rate_end_rps` over the step's
  requests (Poisson gaps at the rate of the moment), to see where a server stops keeping up;
- replay: the traffic file's own timestamps, gaps multiplied by `time_scale`.
Open-loop schedules are deterministic from the seed; the first request goes at offset 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = ["Arrival", "ArrivalKind", "closed_loop", "open_loop", "ramp", "send_offsets_s"]

ArrivalKind = Literal["closed", "poisson", "gamma", "ramp", "replay"]


class Arrival(BaseModel):
    """One step's arrival process, recorded with its result."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: ArrivalKind
    concurrency: int | None = Field(default=None, ge=1)
    rate_rps: float | None = Field(default=None, gt=0)  # a ramp's first rate
    rate_end_rps: float | None = Field(default=None, gt=0)  # a ramp's last rate
    burstiness: float = Field(default=1.0, gt=0)
    time_scale: float = Field(default=1.0, gt=0)
    seed: int = 0

    @model_validator(mode="after")
    def _complete(self) -> Arrival:
        if self.kind == "closed" and self.concurrency is None:
            raise ValueError("a closed loop needs a concurrency")
        if self.kind in ("poisson", "gamma", "ramp") and self.rate_rps is None:
            raise ValueError(f"{self.kind} arrivals need a rate")
        if (self.kind == "ramp") != (self.rate_end_rps is not None):
            raise ValueError("a ramp, and only a ramp, has an end rate")
        if self.kind == "poisson" and self.burstiness != 1.0:
            raise ValueError("burstiness applies to gamma arrivals only")
        return self

    @property
    def label(self) -> str:
        """Short name of the step, as the table prints it."""
        if self.kind == "closed":
            return f"c={self.concurrency}"
        if self.kind == "replay":
            return f"replay x{self.time_scale:g}"
        if self.kind == "ramp":
            return f"ramp {self.rate_rps:g}→{self.rate_end_rps:g}/s"
        burst = f" b={self.burstiness:g}" if self.kind == "gamma" else ""
        return f"{self.rate_rps:g}/s {self.kind}{burst}"


def closed_loop(concurrency: int) -> Arrival:
    return Arrival(kind="closed", concurrency=concurrency)


def open_loop(rate_rps: float, *, burstiness: float | None = None, seed: int = 0) -> Arrival:
    """Poisson arrivals, or gamma arrivals when a burstiness is given."""
    if burstiness is None:
        return Arrival(kind="poisson", rate_rps=rate_rps, seed=seed)
    return Arrival(kind="gamma", rate_rps=rate_rps, burstiness=burstiness, seed=seed)


def ramp(rate_start_rps: float, rate_end_rps: float, *, seed: int = 0) -> Arrival:
    """Poisson arrivals whose rate moves linearly from the first to the last rate."""
    return Arrival(kind="ramp", rate_rps=rate_start_rps, rate_end_rps=rate_end_rps, seed=seed)


def send_offsets_s(
    arrival: Arrival, count: int, replay_offsets_s: Sequence[float] | None = None
) -> tuple[float, ...]:
    """Offsets from the step's start at which its first `count` requests are due (open loop and
    replay only; a replay has at most as many as the file has lines)."""
    if count < 0:
        raise ValueError(f"count must be >= 0, got {count}")
    if arrival.kind == "closed":
        raise ValueError(
            "a closed loop has no schedule: each stream sends when its last request ends"
        )
    if arrival.kind == "replay":
        if replay_offsets_s is None:
            raise ValueError("replay arrivals need the traffic file's offsets")
        return tuple(o * arrival.time_scale for o in replay_offsets_s[:count])
    assert arrival.rate_rps is not None
    if count == 0:
        return ()
    rng = np.random.default_rng(arrival.seed)
    if arrival.kind == "ramp":
        assert arrival.rate_end_rps is not None
        rates = np.linspace(arrival.rate_rps, arrival.rate_end_rps, max(count - 1, 1))
        ramp_gaps = rng.exponential(1.0 / rates)[: count - 1]
        return (0.0, *(float(v) for v in np.cumsum(ramp_gaps)))
    shape = 1.0 if arrival.kind == "poisson" else arrival.burstiness
    gaps = rng.gamma(shape, 1.0 / (arrival.rate_rps * shape), size=count - 1)
    return (0.0, *(float(v) for v in np.cumsum(gaps)))
