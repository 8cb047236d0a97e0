"""Frozen configuration models: every input servegate acts on, validated once at the edge."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, field_validator

Fraction = Annotated[float, Field(ge=0.0, le=1.0)]
PositiveSeconds = Annotated[float, Field(gt=0.0)]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class EndpointConfig(_Frozen):
    """One side of the comparison. The API key is named by variable, never stored."""

    url: str
    api_key_env: str | None = None

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError(f"must start with http:// or https://, got {value!r}")
        return value


class Policy(_Frozen):
    """Verdict thresholds (DESIGN.md defaults); a YAML policy file overrides them."""

    canary_pass_rate: Fraction = 1.0
    severe_degeneration_max: int = Field(default=0, ge=0)
    error_rate_increase_max: Fraction = 0.01
    hangs_max: int = Field(default=0, ge=0)
    impossible_reject_s: PositiveSeconds = 10.0
    drift_k: float = Field(default=3.0, gt=0.0)
    drift_epsilon: Fraction = 0.02
    p95_latency_regression_max: Fraction = 0.20
    throughput_drop_max: Fraction = 0.10
    significance_alpha: Fraction = 0.05


class GateConfig(_Frozen):
    """Everything one `servegate gate` run needs."""

    baseline: EndpointConfig
    candidate: EndpointConfig
    baseline_replica: EndpointConfig | None = None
    model: str | None = None
    gates: tuple[str, ...] = ("startup", "numerics", "golden", "context")
    suite: Path | None = None
    categories: tuple[str, ...] | None = None
    request_deadline_s: PositiveSeconds = 60.0
    probe_deadline_s: PositiveSeconds = 15.0
    run_deadline_s: PositiveSeconds = 1800.0
    impossible_prompt_words: int = Field(default=12_000, ge=16)
    numerics_prompts: int = Field(default=12, ge=1)
    policy: Policy = Policy()
