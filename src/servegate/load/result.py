"""The versioned result of `servegate bench`: every number with its definition, and the workload,
arrivals and bounds that produced it, so a later run can repeat it exactly."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from servegate.load.arrival import Arrival
from servegate.load.correctness import CorrectnessCounts
from servegate.load.lengths import LengthCheck
from servegate.load.metrics import StepMetrics
from servegate.load.monitor import ClientLoad
from servegate.load.server_metrics import ServerMetrics
from servegate.load.slo import SLO
from servegate.load.sweep import SweepLimit
from servegate.load.workload import Workload

__all__ = ["SCHEMA_VERSION", "BenchBounds", "BenchResult", "StepResult"]

# 2: `server` on each step (the server's own gauges from its /metrics), `max_under_slo`.
# 3: `workers` (--workers N), each step's `worker_failures` and per-worker `client.workers`.
SCHEMA_VERSION = 3


class StepResult(BaseModel):
    """One step of the sweep (one concurrency, rate or replay), warm-up excluded."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    label: str
    arrival: Arrival
    warmup: int  # requests sent before the measured phase, not measured
    warmup_failed: int
    planned: int  # requests the measured phase meant to send
    stopped_by: Literal["requests", "duration"]
    metrics: StepMetrics
    correctness: CorrectnessCounts
    lengths: LengthCheck
    client: ClientLoad
    server: ServerMetrics | None = None  # None: not asked for (--no-server-metrics)
    worker_failures: tuple[str, ...] = ()  # --workers: workers whose requests are missing


class BenchBounds(BaseModel):
    """Per step: at most `requests` requests and `duration_s` seconds of sending."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    requests: int = Field(ge=1)
    duration_s: float = Field(gt=0)
    warmup: int | None = Field(default=None, ge=0)  # None: one per stream (closed), 1 (open)
    deadline_s: float = Field(gt=0)  # per request; no retries under load
    max_in_flight: int = Field(default=1024, ge=1)


class BenchResult(BaseModel):
    """What `servegate bench --json` writes."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    schema_version: int = SCHEMA_VERSION
    kind: Literal["servegate.bench"] = "servegate.bench"
    servegate_version: str
    endpoint: str  # base URL without user info or query
    model: str | None
    started_at: str  # ISO 8601, UTC
    finished_at: str
    workload: Workload
    slo: SLO | None
    bounds: BenchBounds
    steps: tuple[StepResult, ...]
    max_under_slo: SweepLimit | None = None  # None: no SLO, or no closed/open-loop step
    workers: int = Field(default=1, ge=1)  # client processes the load was spread over

    @property
    def succeeded(self) -> int:
        return sum(step.metrics.succeeded for step in self.steps)
