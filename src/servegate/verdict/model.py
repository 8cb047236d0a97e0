"""The report model: the one versioned object every output (JSON, terminal, HTML, JUnit) renders."""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic_core import PydanticSerializationError

# 2: the Performance Report (`performance`), and `ratio`/`interval` on checks.
# 3: environment fingerprints (`environment`), managed launches (`launch`) and
#    `performance_evidence` (what was measured under load beside the judged rows).
# 4: each gate's `time` (wall seconds and requests per side).
SCHEMA_VERSION = 4


def safe_json(model: BaseModel, indent: int | None = None) -> str:
    """A model as JSON text. A lone surrogate in server text (valid in a JSON escape, not in
    UTF-8) becomes U+FFFD instead of failing the whole dump (FAULTS 34)."""
    try:
        return model.model_dump_json(indent=indent)
    except PydanticSerializationError:
        text = json.dumps(model.model_dump(mode="json"), indent=indent, ensure_ascii=False)
        return text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")


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


class Outcome(StrEnum):
    PASS = "pass"
    FAIL = "fail"
    NOT_MEASURED = "not-measured"
    # The server does not offer what the check needs at all (no prompt logprobs, no embeddings
    # endpoint): listed with its reason, never a pass, never blocking — unlike NOT_MEASURED,
    # which is a measurement the server offers that failed or could not be trusted.
    NOT_APPLICABLE = "not-applicable"


class Check(_Frozen):
    """One judged metric: the candidate's value against its limit, or why it was not measured."""

    name: str  # stable id within its gate, e.g. "perplexity_shift"
    title: str  # what a reader sees: "perplexity shift on the reference texts"
    outcome: Outcome
    candidate: str = "-"  # the candidate's value, with its unit
    baseline: str = "-"  # the baseline's own value or noise floor, with its unit
    limit: str = "-"  # the threshold, with its unit and how it was formed
    policy_key: str | None = None  # where the threshold comes from
    core: bool = False  # the gate cannot pass without it
    reason: str = ""  # why it failed, or why it could not be measured
    row: str | None = None  # the Correctness or Performance Report row this check feeds, if any
    ratio: str = "-"  # performance: candidate / baseline, e.g. "1.32×"
    interval: str = "-"  # performance: the ratio's confidence interval, e.g. "1.21–1.45× (95 %)"

    @property
    def measured(self) -> bool:
        return self.outcome in (Outcome.PASS, Outcome.FAIL)

    @property
    def applicable(self) -> bool:
        return self.outcome is not Outcome.NOT_APPLICABLE


class Divergence(_Frozen):
    """Where the candidate's answer left the baseline's, and why that is (or is not) noise."""

    gate: str
    probe: str
    token_index: int | None = None
    baseline_token: str | None = None
    candidate_token: str | None = None
    margin_nats: float | None = None  # the baseline's top-1 − top-2 there
    gap_nats: float | None = None  # the baseline's top-1 − its logprob of the candidate's token
    candidate_in_baseline_top_k: bool | None = None
    baseline_in_candidate_top_k: bool | None = None
    explanation: str  # "near-tie", "confident", "one side stopped", "unstable on the baseline"…
    blocking: bool = False
    note: str = ""


MetricValue = float | int | str | bool | None


class PartTime(_Frozen):
    """One part of a gate's work (what its requests were for: "noise floor", "load blocks"):
    the time some request of it was in flight on either side, and its requests per side."""

    part: str
    seconds: float  # the union of its requests' intervals: overlapping requests count once
    requests: dict[str, int] = Field(default_factory=dict)

    def text(self) -> str:
        return f"{self.part} {self.seconds:.1f} s ({sum(self.requests.values())})"


class GateTime(_Frozen):
    """Where a gate's time went: its wall time and the requests it sent, per side, and per part
    (largest first). Parts overlap (the baseline's noise floor while the candidate answers) and
    leave gaps (judging, waiting), so their seconds need not sum to the gate's."""

    seconds: float
    requests: dict[str, int] = Field(default_factory=dict)  # "baseline", "candidate", "replica"
    parts: tuple[PartTime, ...] = ()
    # Per side, the time some request of it was in flight: the busier side bounds the gate's
    # time from below (its requests wait on each other), the other side idled the rest.
    busy: dict[str, float] = Field(default_factory=dict)
    # With a run budget (`--budget`): the share of its scalable work the gate was planned and
    # what that gave up, in words ("" without a budget).
    share: float | None = None
    plan: str = ""

    @property
    def total_requests(self) -> int:
        return sum(self.requests.values())

    def text(self) -> str:
        """`12.3 s, 48 requests` — what the reports print."""
        return f"{self.seconds:.1f} s, {self.total_requests} requests"

    def busy_text(self) -> str:
        """`baseline busy 95 %, candidate 41 %` of the gate's seconds."""
        if not self.busy or self.seconds <= 0:
            return ""
        return ", ".join(
            f"{side} busy {min(1.0, s / self.seconds):.0%}" for side, s in self.busy.items()
        )


class GateResult(_Frozen):
    """A judged gate: status, its metrics (names carry units) and findings."""

    name: str
    status: Status
    summary: str
    metrics: dict[str, MetricValue] = Field(default_factory=dict)
    checks: tuple[Check, ...] = ()
    findings: tuple[Finding, ...] = ()
    divergences: tuple[Divergence, ...] = ()
    details: dict[str, Any] = Field(default_factory=dict)
    # Every check this gate could not make, with the reason: listed, never counted as a pass.
    not_measured: tuple[str, ...] = ()
    # What the servers do not offer at all (`title: reason`): listed, neither a pass nor a gap.
    not_applicable: tuple[str, ...] = ()
    # Its wall time and requests (None: not run, or a report older than schema 4).
    time: GateTime | None = None


class CorrectnessRow(_Frozen):
    """One line of the Correctness Report: baseline, candidate, threshold, status."""

    metric: str
    gate: str
    baseline: str
    candidate: str
    threshold: str
    status: Status


class PerformanceRow(_Frozen):
    """One line of the Performance Report: a gate's check, with the metric's definition."""

    metric: str
    gate: str
    baseline: str
    candidate: str
    ratio: str
    interval: str
    threshold: str
    status: Status
    definition: str


class LaunchRecord(_Frozen):
    """A side servegate started itself: the command, its log, and how start-up went. Times are
    from process start; memory is the largest sample (every 0.5 s) over the whole run."""

    command: str
    log_path: str
    outcome: str  # ready, exited, not-found, port-taken, timeout
    message: str
    pid: int | None = None  # the process servegate started, stopped when the run ended
    load_s: float | None = None  # process start -> port accepts connections
    ready_s: float | None = None  # process start -> first successful completion
    peak_rss_mb: float | None = None
    gpu_memory_mb: float | None = None
    gpu_note: str = ""  # why GPU memory was not measured


class EvidenceRow(_Frozen):
    """A line of the Performance Report shown as evidence, not judged: e.g. the server's own
    KV-cache usage during the load blocks, or why it was not measured."""

    metric: str
    gate: str
    baseline: str
    candidate: str
    definition: str


class Fingerprint(_Frozen):
    """What was compared: URL without secrets, model, server version, declared matrix fields,
    and the environment servegate found (flat `key: value`, e.g. `python.torch`, `gpu.driver`,
    `server.max_context`)."""

    url: str
    model: str | None = None
    version: str | None = None
    models: tuple[str, ...] = ()
    matrix: dict[str, str] = Field(default_factory=dict)
    environment: dict[str, str] = Field(default_factory=dict)
    launch: LaunchRecord | None = None
    # Set when this side was not asked live: the stored baseline that answered, and when it was
    # recorded (`servegate gate --baseline-run NAME`).
    stored_baseline: str | None = None


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
    # 1, or the attempt that finished a run resumed with `servegate gate --resume` (the gates
    # judged by earlier attempts are kept as they were).
    attempt: int = 1
    verdict: Status
    exit_code: int
    reason: str
    baseline: Fingerprint
    candidate: Fingerprint
    gates: tuple[GateResult, ...]
    correctness: tuple[CorrectnessRow, ...] = ()
    performance: tuple[PerformanceRow, ...] = ()
    performance_evidence: tuple[EvidenceRow, ...] = ()
    definitions: dict[str, str] = Field(default_factory=dict)
