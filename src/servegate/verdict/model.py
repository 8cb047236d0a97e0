"""The report model: the one versioned object every output (JSON, terminal, HTML, JUnit) renders."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

SCHEMA_VERSION = 1


class Status(StrEnum):
    PASS = "pass"
    FAIL = "fail"
    INCONCLUSIVE = "inconclusive"
    SKIP = "skip"


class Severity(StrEnum):
    CRITICAL = "critical"
    MAJOR = "major"
    MINOR = "minor"
    INFO = "info"


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Finding(_Frozen):
    """One observation worth a person's attention, with the evidence to reproduce it."""

    probe: str
    category: str
    severity: Severity
    message: str
    side: str | None = None
    baseline_excerpt: str | None = None
    candidate_excerpt: str | None = None
    curl: str | None = None

    @property
    def blocking(self) -> bool:
        return self.severity in (Severity.CRITICAL, Severity.MAJOR)


MetricValue = float | int | str | bool | None


class GateResult(_Frozen):
    """A judged gate: status, its metrics (names carry units) and findings."""

    name: str
    status: Status
    summary: str
    metrics: dict[str, MetricValue] = Field(default_factory=dict)
    findings: tuple[Finding, ...] = ()
    details: dict[str, Any] = Field(default_factory=dict)


class CorrectnessRow(_Frozen):
    """One line of the Correctness Report: baseline, candidate, threshold, status."""

    metric: str
    gate: str
    baseline: str
    candidate: str
    threshold: str
    status: Status


class Fingerprint(_Frozen):
    """What was compared: URL without secrets, model, server version, declared matrix fields."""

    url: str
    model: str | None = None
    version: str | None = None
    models: tuple[str, ...] = ()
    matrix: dict[str, str] = Field(default_factory=dict)


class Verdict(_Frozen):
    status: Status
    exit_code: int
    reason: str


class Report(_Frozen):
    """The versioned JSON report contract (`schema_version`)."""

    schema_version: int = SCHEMA_VERSION
    tool: str
    run_id: str
    started_at: str
    finished_at: str
    duration_s: float
    verdict: Status
    exit_code: int
    reason: str
    baseline: Fingerprint
    candidate: Fingerprint
    gates: tuple[GateResult, ...]
    correctness: tuple[CorrectnessRow, ...] = ()
    definitions: dict[str, str] = Field(default_factory=dict)
