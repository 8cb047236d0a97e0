"""Frozen configuration models: every input servegate acts on, validated once at the edge.
The verdict policy lives in `config/policy.py` and is re-exported here."""

from __future__ import annotations

import shlex
from itertools import pairwise
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, field_validator, model_validator

from servegate.config.base import Fraction, PositiveSeconds
from servegate.config.base import Frozen as _Frozen
from servegate.config.policy import (
    CanaryPolicy,
    NumericsMeasurement,
    NumericsPolicy,
    Policy,
    SamplingPolicy,
    Tolerance,
)
from servegate.config.slo import SLO, parse_slo

__all__ = [
    "MANAGED_URL",
    "PORT_PLACEHOLDER",
    "CanaryPolicy",
    "EndpointConfig",
    "Fraction",
    "GateConfig",
    "LaunchConfig",
    "NumericsMeasurement",
    "NumericsPolicy",
    "PerformanceConfig",
    "Policy",
    "PositiveSeconds",
    "SamplingPolicy",
    "Tolerance",
]


PORT_PLACEHOLDER = "{port}"
MANAGED_URL = "http://127.0.0.1:{port}/v1"


class LaunchConfig(_Frozen):
    """How servegate starts a managed engine: `{port}` in the command, environment or URL is
    replaced by a free loopback port picked at launch."""

    command: tuple[str, ...] = Field(min_length=1)
    env: dict[str, str] = Field(default_factory=dict)  # added to servegate's own environment
    cwd: Path | None = None
    ready_timeout_s: PositiveSeconds = 300.0  # process start -> first successful completion
    stop_timeout_s: PositiveSeconds = 10.0  # SIGTERM -> SIGKILL of its process group

    @field_validator("command", mode="before")
    @classmethod
    def _split(cls, value: Any) -> Any:
        if isinstance(value, str):
            return tuple(shlex.split(value))
        return value


class EndpointConfig(_Frozen):
    """One side of the comparison. The API key is named by variable, never stored. With a
    `launch` block servegate starts the engine itself (the URL defaults to MANAGED_URL)."""

    url: str | None = None
    api_key_env: str | None = None
    launch: LaunchConfig | None = None
    # Declared execution-path fields (engine version, hardware, TP, quantization, ...).
    matrix: dict[str, str] = Field(default_factory=dict)

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError(f"must start with http:// or https://, got {value!r}")
        return value

    @model_validator(mode="after")
    def _url_or_launch(self) -> EndpointConfig:
        if self.url is None and self.launch is None:
            raise ValueError("give a url, or a launch block for servegate to start the engine")
        if self.launch is None and self.url is not None and PORT_PLACEHOLDER in self.url:
            raise ValueError(f"{PORT_PLACEHOLDER} in the url needs a launch block")
        return self

    @property
    def url_template(self) -> str:
        """The URL, `{port}` not yet replaced for a managed engine."""
        return self.url if self.url is not None else MANAGED_URL


class PerformanceConfig(_Frozen):
    """The performance gate's load: interleaved closed-loop blocks of synthetic requests."""

    concurrency: int = Field(default=4, ge=1)
    # Per side, interleaved A B, B A, A B, ... Latencies are judged per block: 6 blocks a side
    # let a rank test over blocks reach p 0.001, so one block disturbed by another process on
    # either side neither fails a clean candidate nor hides a regression in the other five
    # (4 blocks: p >= 0.014, and one disturbed baseline block hid a 1.5x regression).
    blocks: int = Field(default=6, ge=1)
    requests_per_block: int = Field(default=8, ge=1)
    # Sent by each side before its first block, not measured; None: one per stream.
    warmup: int | None = Field(default=None, ge=0)
    input_tokens: int = Field(default=48, ge=1)
    output_tokens: int = Field(default=24, ge=1)
    # Prompts of the first block each side also answers alone, one at a time (temperature 0).
    isolated_prompts: int = Field(default=8, ge=0)
    seed: int = 0
    # Each side's Prometheus /metrics is scraped this often during its blocks (evidence, not
    # judged); None: not scraped.
    server_metrics_interval_s: float | None = Field(default=1.0, gt=0)
    # Capacity under an SLO (opt-in: without an SLO no sweep runs, so default runs take no
    # longer): after the blocks, one closed-loop step per concurrency on each side, sides
    # interleaved per step; a side stops climbing after its first step that missed the SLO.
    # In YAML and on the command line the SLO is the `ttft_ms=…,tpot_ms=…,e2el_ms=…` string.
    slo: SLO | None = None
    capacity_concurrency: tuple[Annotated[int, Field(ge=1, le=1024)], ...] = Field(
        default=(1, 2, 4, 8), min_length=1, max_length=16
    )
    # Measured requests per step and side. A step is all the evidence the capacity check has at
    # its concurrency: with 16, a candidate missing the SLO on 5 of 16 where the baseline missed
    # none is significant (one-sided Fisher p 0.022; 4 of 16: p 0.051), and a sweep of 1, 2, 4,
    # 8 stays at 64 requests a side. Fewer than 4 can never be significant (not measured).
    capacity_requests: int = Field(default=16, ge=1, le=1024)

    @field_validator("slo", mode="before")
    @classmethod
    def _parse_slo(cls, value: Any) -> Any:
        return parse_slo(value) if isinstance(value, str) else value

    @field_validator("capacity_concurrency", mode="before")
    @classmethod
    def _split(cls, value: Any) -> Any:
        """`1,2,4,8` as a string too, as on the command line."""
        if isinstance(value, str):
            return tuple(part.strip() for part in value.split(","))
        return value

    @field_validator("capacity_concurrency")
    @classmethod
    def _ascending(cls, value: tuple[int, ...]) -> tuple[int, ...]:
        if any(b <= a for a, b in pairwise(value)):
            raise ValueError(f"concurrencies must ascend, got {','.join(map(str, value))}")
        return value


class GateConfig(_Frozen):
    """Everything one `servegate gate` run needs."""

    baseline: EndpointConfig
    candidate: EndpointConfig
    baseline_replica: EndpointConfig | None = None
    # The name of a stored baseline (`servegate baseline record`) answering for the baseline,
    # whose server may be gone; `baseline.url` is then the URL it was recorded from.
    baseline_run: str | None = None
    model: str | None = None
    gates: tuple[str, ...] = (
        "startup", "numerics", "embeddings", "golden", "sampling", "context", "performance"
    )  # fmt: skip
    suite: Path | None = None
    categories: tuple[str, ...] | None = None
    request_deadline_s: PositiveSeconds = 60.0
    probe_deadline_s: PositiveSeconds = 15.0
    run_deadline_s: PositiveSeconds = 1800.0
    impossible_prompt_words: int = Field(default=12_000, ge=16)
    numerics_prompts: int = Field(default=12, ge=1)
    # The time prompt scoring (perplexity on the reference texts) may take per side: a server
    # that scores slowly (stock llama-cpp-python sorts its vocabulary in Python for every echoed
    # token: ~0.15 s/token on 2 cores, 7 minutes for the ~2,950-token texts) scores the texts
    # one by one until the next would not fit, and the report says how many tokens that was.
    perplexity_budget_s: PositiveSeconds = 600.0
    # A side that timed out on this many requests in a row gets no more requests in that gate:
    # the rest are "not sent", so a candidate that hangs on everything still meets the deadline.
    hung_after_timeouts: int = Field(default=2, ge=1)
    # Any unmeasured check makes its gate inconclusive, not only a gate's core measurement.
    strict: bool = False
    # Run every configured gate even after a correctness gate failed with a critical finding
    # (by default the run fails fast there: the rollback is decided, and the gates not run are
    # listed as skipped with the reason).
    complete: bool = False
    # Baseline and candidate are different servers: where a correctness gate sends the same
    # request to both, they are served at the same time (the candidate's deadline still scaled
    # to the baseline's answer). False: one after the other (e.g. one server reached under two
    # names, whose requests would interleave). The performance gate always interleaves blocks.
    sides_at_once: bool = True
    performance: PerformanceConfig = PerformanceConfig()
    policy: Policy = Policy()
    # A managed engine's log goes to a folder per run under this one.
    run_dir: Path = Path(".servegate") / "runs"
    # A user catalogue of start-up log patterns, added to the shipped one.
    log_patterns: Path | None = None
