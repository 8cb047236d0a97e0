"""Frozen configuration models: every input servegate acts on, validated once at the edge.
The verdict policy lives in `config/policy.py` and is re-exported here."""

from __future__ import annotations

import shlex
from itertools import pairwise
from pathlib import Path
from typing import Annotated, Any, Literal

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

    command: tuple[str, ...] = Field(
        min_length=1,
        description="The engine's command line: a list, or a string split as a shell would "
        "(no shell runs it); `{port}` is the port servegate picked.",
    )
    env: dict[str, str] = Field(
        default_factory=dict,
        description="Variables added to servegate's own environment for the engine "
        "(e.g. CUDA_VISIBLE_DEVICES).",
    )
    cwd: Path | None = Field(
        default=None,
        description="The engine's working folder; relative to the config file's folder.",
    )
    ready_timeout_s: PositiveSeconds = Field(
        default=300.0,
        description="Process start to its first successful completion; a large model's first "
        "start (download, load, compile) needs far more.",
    )
    stop_timeout_s: PositiveSeconds = Field(
        default=10.0, description="SIGTERM to SIGKILL of the engine's process group."
    )

    @field_validator("command", mode="before")
    @classmethod
    def _split(cls, value: Any) -> Any:
        if isinstance(value, str):
            return tuple(shlex.split(value))
        return value


class EndpointConfig(_Frozen):
    """One side of the comparison. The API key is named by variable, never stored. With a
    `launch` block servegate starts the engine itself (the URL defaults to
    http://127.0.0.1:{port}/v1, MANAGED_URL)."""

    url: str | None = Field(
        default=None,
        description="The OpenAI-compatible base URL, e.g. http://10.0.0.1:8000/v1 (with a "
        "launch block: http://127.0.0.1:{port}/v1 unless given).",
    )
    api_key_env: str | None = Field(
        default=None, description="The environment variable holding this side's API key."
    )
    launch: LaunchConfig | None = Field(
        default=None, description="servegate starts (and stops) the engine itself: `launch.*`."
    )
    matrix: dict[str, str] = Field(
        default_factory=dict,
        description="Declared execution-path fields (engine_version, hardware, tp, "
        "quantization, …), recorded with the run.",
    )

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

    concurrency: int = Field(
        default=4, ge=1, description="Requests in flight per side (closed loop)."
    )
    # Per side, interleaved A B, B A, A B, ... Latencies are judged per block: 6 blocks a side
    # let a rank test over blocks reach p 0.001, so one block disturbed by another process on
    # either side neither fails a clean candidate nor hides a regression in the other five
    # (4 blocks: p >= 0.014, and one disturbed baseline block hid a 1.5x regression).
    blocks: int = Field(
        default=6,
        ge=1,
        description="Load blocks per side, interleaved A B, B A, …; latencies are judged per "
        "block.",
    )
    # Sequential looks (docs/gates.md): after `blocks` a side the latency and throughput checks
    # look at their intervals; while TTFT, E2EL or throughput is undecided, 2 more blocks a side
    # run and they look again, up to this many a side. Undecided then: not measured.
    max_blocks: int = Field(
        default=12,
        ge=1,
        description="The most load blocks per side: while TTFT, E2EL or throughput is "
        "undecided after `blocks`, 2 more a side and another look, up to this many (the larger "
        "of this and `blocks`).",
    )
    # `--budget` sets it to the seconds its plan leaves after the first look (docs/gates.md).
    looks_within_s: float | None = Field(
        default=None,
        gt=0,
        description="The most seconds the looks after the first may take in all, each look's "
        "time estimated from the first look's blocks: a look that would not fit is not run, and "
        "a check it would have decided is not measured (null: no limit but max_blocks; "
        "`--budget` sets it).",
    )
    requests_per_block: int = Field(default=8, ge=1, description="Measured requests per block.")
    warmup: int | None = Field(
        default=None,
        ge=0,
        description="Requests each side is sent before its first block, not measured "
        "(null: one per stream).",
    )
    input_tokens: int = Field(
        default=48, ge=1, description="Prompt length of each synthetic request, in tokens."
    )
    output_tokens: int = Field(
        default=24, ge=1, description="max_tokens of each synthetic (greedy) request."
    )
    isolated_prompts: int = Field(
        default=8,
        ge=0,
        description="Prompts of the first block each side also answers alone, one at a time, "
        "for the answers-under-load comparison.",
    )
    seed: int = Field(default=0, description="Seed of the synthetic prompts.")
    server_metrics_interval_s: float | None = Field(
        default=1.0,
        gt=0,
        description="How often each side's Prometheus /metrics is scraped during its blocks "
        "(evidence, not judged; null: not scraped).",
    )
    # Capacity under an SLO (opt-in: without an SLO no sweep runs, so default runs take no
    # longer): after the blocks, one closed-loop step per concurrency on each side, sides
    # interleaved per step; a side stops climbing after its first step that missed the SLO.
    # In YAML and on the command line the SLO is the `ttft_ms=…,tpot_ms=…,e2el_ms=…` string.
    slo: SLO | None = Field(
        default=None,
        description="An SLO, `ttft_ms=…,tpot_ms=…,e2el_ms=…`: after the blocks, each side's "
        "max concurrency under it (a sweep; none without an SLO).",
    )
    capacity_concurrency: tuple[Annotated[int, Field(ge=1, le=1024)], ...] = Field(
        default=(1, 2, 4, 8),
        min_length=1,
        max_length=16,
        description="The ascending concurrencies of the SLO sweep.",
    )
    # Measured requests per step and side. A step is all the evidence the capacity check has at
    # its concurrency: with 16, a candidate missing the SLO on 5 of 16 where the baseline missed
    # none is significant (one-sided Fisher p 0.022; 4 of 16: p 0.051), and a sweep of 1, 2, 4,
    # 8 stays at 64 requests a side. Fewer than 4 can never be significant (not measured).
    capacity_requests: int = Field(
        default=16, ge=1, le=1024, description="Measured requests per sweep step and side."
    )

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

    baseline: EndpointConfig = Field(
        description="The side that is trusted: `url`, or a `launch` block (`baseline.*`)."
    )
    candidate: EndpointConfig = Field(
        description="The change under test, the same keys as baseline (`candidate.*`)."
    )
    baseline_replica: EndpointConfig | None = Field(
        default=None,
        description="A second baseline server: its disagreement with the baseline joins the "
        "A/A noise floor, and the performance limits widen by it.",
    )
    baseline_run: str | None = Field(
        default=None,
        description="A stored baseline (`servegate baseline record`) answering for the "
        "baseline, whose server may be gone; `baseline.url` is then the URL it was recorded "
        "from.",
    )
    model: str | None = Field(
        default=None, description="The model name sent (default: the first model both list)."
    )
    gates: tuple[str, ...] = Field(
        default=(
            "startup",
            "numerics",
            "embeddings",
            "golden",
            "sampling",
            "context",
            "performance",
        ),
        description="The gates to run, in this order.",
    )
    suite: Path | None = Field(
        default=None,
        description="A golden-suite YAML file instead of the shipped default; relative to the "
        "config file's folder.",
    )
    categories: tuple[str, ...] | None = Field(
        default=None,
        description="Only the golden probes of these categories (each must be in the suite).",
    )
    golden_concurrency: Annotated[int, Field(ge=1, le=16)] | Literal["auto"] = Field(
        default=1,
        description="Golden probes in flight at once on each side. auto: as many as both "
        "sides batch — each side is sent one short request alone and 4 at once; a side that "
        "answers the 4 within 2× the time of one batches (vLLM does; llama-cpp-python serves "
        "one at a time), and then 4 probes go at once, else 1; the baseline's own paths are "
        "sent the same way, so its noise is measured as the probes are sent. Faster on a "
        "batching server, less power per probe: vLLM's answers vary with the requests beside "
        "them (on 2 cores: golden 100 s instead of 283 s, but 10 of 38 probes unstable on the "
        "baseline and the stream-parity limit 0 % → 35-88 %; docs/gates.md). Default 1: one "
        "at a time, the full power.",
    )
    sampling_answer_concurrency: Annotated[int, Field(ge=1, le=64)] | Literal["auto"] = Field(
        default="auto",
        description="The sampling gate's longer answers (penalty and production settings) in "
        "flight on each side. auto: 16 on a side that batches, 4 on one that serves one "
        "request at a time — each side measured as golden's auto measures it (one short "
        "request alone, then 4 at once); one request's repeats together, never beside "
        "another request's. Each answer is judged against its own logprobs (penalties) or as "
        "a pair (production): on two vLLM 0.32.0 CPU servers the gate's longer answers took "
        "64-66 s instead of 100 s, the penalties' stated power unchanged. The first-token "
        "draws stay 4 at a time: each cell's draws are judged against one mean report, and "
        "vLLM's distribution moves with the batch (at 16, one A/A run in three failed "
        "temperature_0.5). A number: that many on both sides, unmeasured.",
    )
    baseline_paths: Literal["when-needed", "always"] = Field(
        default="when-needed",
        description="When the baseline's own noise is measured (numerics' noise floor along "
        "its paths, golden's cache-hit path): when-needed sends those requests, to the "
        "baseline only, once a candidate answer could be judged differently with the noise "
        "than without it (numerics: a token flip, or a mean absolute Δlogprob above the "
        "tolerance alone; golden: a probe the candidate fails, streams differently or "
        "degenerates on). The noise only widens limits and excuses failures, so a candidate "
        "that passes without it passes with it: the verdict is the same, and an identical "
        "candidate is judged without the default plan's 98 baseline-only requests. The report "
        "says which were not sent and why. always: every run measures them (`baseline record` "
        "always does, for the candidates compared with it later).",
    )
    request_deadline_s: PositiveSeconds = Field(
        default=60.0,
        description="Total deadline of each gate request; a request that passes it is a "
        "timeout (a hang), never a content verdict.",
    )
    probe_deadline_s: PositiveSeconds = Field(
        default=15.0,
        description="Deadline of the start-up probes (readiness, the impossible request).",
    )
    run_deadline_s: PositiveSeconds = Field(
        default=1800.0,
        description="Deadline of the whole run: finished gates keep their results, the running "
        "one is inconclusive.",
    )
    impossible_prompt_words: int = Field(
        default=12_000,
        ge=16,
        description="Words in the over-long prompt that must be rejected fast (when the "
        "context is not discovered; set it above the server's context).",
    )
    numerics_prompts: int = Field(
        default=12,
        ge=1,
        description="How many of the shipped numerics prompts are sent (fewer is faster, less "
        "thorough).",
    )
    # A server that scores slowly (stock llama-cpp-python sorts its vocabulary in Python for
    # every echoed token: ~0.15 s/token on 2 cores, 7 minutes for the ~2,950-token texts).
    perplexity_budget_s: PositiveSeconds = Field(
        default=600.0,
        description="The time prompt scoring (perplexity on the reference texts) may take per "
        "side: the texts are scored one by one until the next would not fit, and the report "
        "says how many tokens were scored.",
    )
    sampling_share: Annotated[float, Field(gt=0.0, le=1.0)] = Field(
        default=1.0,
        description="The share of the sampling gate's plan sent: every cell's first-token "
        "draws scaled by it, at least 3 each and 24 a truncation cell; the seeds, penalty "
        "answers and production answers stay (1: the whole plan). Fewer is faster and less "
        "sensitive: each passing check's limit states the temperature error it would have "
        "detected at the draws it got (a check left too few draws to test is not measured).",
    )
    budget_s: PositiveSeconds | None = Field(
        default=None,
        description="Plan the run to fit this many seconds (`--budget 5m`): before each gate "
        "the measured speed of the gates so far and the time left size the scalable work "
        "(numerics' probes and prompt scoring, the sampling plan's share, the performance "
        "gate's requests a block and extra looks); golden, context and startup run whole. "
        "Each gate's report says what it was given and which power that gave up. null: every "
        "gate at full power. A plan, not a deadline (run_deadline_s is one).",
    )
    hung_after_timeouts: int = Field(
        default=2,
        ge=1,
        description="Timeouts in a row after which a side gets no more requests in a gate (the "
        "rest are 'not sent'): a candidate that hangs on everything still meets the deadline.",
    )
    strict: bool = Field(
        default=False,
        description="Any unmeasured check makes its gate inconclusive, not only a gate's core "
        "measurement.",
    )
    complete: bool = Field(
        default=False,
        description="Run every configured gate even after a correctness gate failed with a "
        "critical finding (by default the run fails fast there: the rollback is decided, and "
        "the gates not run are listed as skipped with the reason).",
    )
    sides_at_once: bool = Field(
        default=True,
        description="Where a correctness gate sends both sides the same request, they are "
        "served at the same time. false: one after the other (one server reached under two "
        "names). The performance gate always interleaves its blocks.",
    )
    performance: PerformanceConfig = Field(
        default=PerformanceConfig(), description="The performance gate's load (`performance.*`)."
    )
    policy: Policy = Field(
        default=Policy(),
        description="Verdict policy keys (docs/policy.md); `--policy FILE` replaces them.",
    )
    run_dir: Path = Field(
        default=Path(".servegate") / "runs",
        description="Where the logs of engines servegate launches go, a folder per run.",
    )
    log_patterns: Path | None = Field(
        default=None,
        description="A YAML catalogue of start-up log patterns added to the shipped one; "
        "relative to the config file's folder.",
    )
