"""Frozen configuration models: every input servegate acts on, validated once at the edge."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

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


def _key(default: Any, unit: str, reason: str, **constraints: Any) -> Any:
    """A policy key: its default, its unit and why it has that value (docs/policy.md)."""
    extra: dict[str, Any] = {"unit": unit}
    return Field(default=default, description=reason, json_schema_extra=extra, **constraints)


class Tolerance(_Frozen):
    """How far a candidate may drift beyond the baseline's measured noise: set per model.

    Each limit is `noise_k × (the floor measured on the baseline) + tolerance`, so a deterministic
    engine (floor exactly 0) is still judged on a scale, and a noisy one on its own noise.
    """

    dlogprob_nats: float = _key(
        0.10,
        "nats/token",
        "Mean |Δlogprob| of the baseline's greedy tokens on the common prefix. Measured on "
        "SmolLM2-135M Q4_1 by teacher forcing over the shipped reference texts: harmless kernel "
        "paths (flash attention, single-token batches) move it by 0.05-0.06; a broken layer norm "
        "by 0.2-0.5.",
        ge=0.0,
    )
    confident_flip_rate: Fraction = _key(
        0.0,
        "fraction of numerics probes",
        "Share of probes whose first divergence is a confident disagreement (the baseline's gap "
        "to the candidate's token above the near-tie limit). Harmless kernel changes flip only "
        "near-ties (measured: none confident); the mixed-dtype fusion bug flips 12 of 12.",
    )
    perplexity_shift_nats: float = _key(
        0.01,
        "nats/token",
        "Smallest increase of the mean teacher-forced NLL on the reference texts that counts as "
        "a regression once it is also significant (perplexity_z_max). Measured: harmless kernel "
        "paths +0.001 to +0.003; a 20 % logit-scale error +0.07; a broken layer +0.2.",
        ge=0.0,
    )
    stream_mismatch_rate: Fraction = _key(
        0.0,
        "fraction of golden probes",
        "Share of golden probes whose streamed answer differs from the non-streamed one, beyond "
        "the baseline's own share. The same request streamed or not runs the same computation; "
        "on the reference engine both agree on every probe.",
    )


class Policy(_Frozen):
    """Verdict thresholds (DESIGN.md defaults); a YAML policy file overrides them.

    Every key has a unit and a reason: docs/policy.md is generated from this class
    (`servegate policy`), and a test keeps the two equal.
    """

    canary_pass_rate: Fraction = _key(
        1.0,
        "fraction of usable canaries",
        "Deterministic canaries the baseline passes (and answers the same along its own paths) "
        "that the candidate must pass too. DESIGN.md: 100 %.",
    )
    severe_degeneration_max: int = _key(
        0,
        "probes",
        "Golden probes with severe degeneration (a same-character run, abnormal characters, "
        "punctuation soup, empty output) where the baseline had none.",
        ge=0,
    )
    hangs_max: int = _key(
        0,
        "requests",
        "Requests that got no answer within their deadline, scaled to the baseline's own "
        "latency for the same request and retried once: a hang is never a content verdict.",
        ge=0,
    )
    impossible_reject_s: float = _key(
        10.0,
        "seconds",
        "A prompt longer than the context must be rejected within this time, never hang "
        "(the vLLM #35541 class).",
        gt=0.0,
    )
    noise_k: float = _key(
        3.0,
        "× floor",
        "How many times the baseline's own noise (A/A and path noise: cache hit vs miss, "
        "streamed vs not, alongside another request, a replica) a candidate may drift.",
        gt=0.0,
    )
    near_tie_margin_nats: float = _key(
        0.5,
        "nats",
        "A flip is a near-tie (benign) when the baseline's top-1 logprob is at most this far "
        "above the candidate's token; the largest gap at which the baseline flipped against "
        "itself raises the limit. vLLM's own CI accepts any token inside the other's top-k.",
        gt=0.0,
    )
    perplexity_z_max: float = _key(
        3.0,
        "z (standard errors)",
        "A perplexity shift must be this many standard errors (batch means over 32-token "
        "blocks) above zero, as well as above the tolerance, to fail. Measured: harmless "
        "kernel paths z ≈ 0-1.2; a 20 % logit-scale error z ≈ 9.",
        gt=0.0,
    )
    cross_nll_excess_nats: float = _key(
        1.0,
        "nats/token",
        "How much less likely the baseline may find the candidate's greedy text than its own "
        "(teacher-forced). `,,,,,,,,` after a fused-kernel bug is several nats/token worse.",
        gt=0.0,
    )
    embedding_cosine_min: Fraction = _key(
        0.999,
        "cosine",
        "Smallest cosine similarity between the two sides' embeddings of the same input "
        "(DESIGN.md: 1 - 1e-3).",
    )
    echo_alignment_max_nats: float = _key(
        0.1,
        "nats/token",
        "Echo (prompt) logprobs are used for perplexity and cross-scoring only when, on a "
        "greedy continuation, they equal the generation logprobs within this mean error; a "
        "server that reports them shifted by a position cannot be scored (not measured).",
        gt=0.0,
    )
    timeout_latency_factor: float = _key(
        3.0,
        "× baseline latency",
        "A candidate request is given max(request deadline, this × the baseline's latency for "
        "the same request) and one retry before it counts as a hang, so a loaded machine does "
        "not turn a slow answer into a content regression.",
        ge=1.0,
    )
    tolerance: Tolerance = Field(
        default_factory=Tolerance,
        description="The drift tolerance for any model without an entry in `models`.",
    )
    models: dict[str, Tolerance] = Field(
        default_factory=dict,
        description="Per-model tolerances, keyed by the model name sent to the servers; keys "
        "given here override `tolerance`, the others keep its values.",
    )

    def tolerance_for(self, model: str | None) -> Tolerance:
        """The tolerance for `model`: its `models` entry over the default `tolerance`."""
        own = self.models.get(model or "")
        if own is None:
            return self.tolerance
        return self.tolerance.model_copy(update=own.model_dump(exclude_unset=True))


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
    # A side that timed out on this many requests in a row gets no more requests in that gate:
    # the rest are "not sent", so a candidate that hangs on everything still meets the deadline.
    hung_after_timeouts: int = Field(default=2, ge=1)
    # Any unmeasured check makes its gate inconclusive, not only a gate's core measurement.
    strict: bool = False
    policy: Policy = Policy()
