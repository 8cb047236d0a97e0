"""The verdict policy: every threshold with its unit and the reason for its default
(docs/policy.md is generated from these classes by `servegate policy`)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from servegate.config.base import Fraction
from servegate.config.base import Frozen as _Frozen


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
    load_mismatch_rate: Fraction = _key(
        0.125,
        "fraction of prompts",
        "Share of temperature-0 prompts whose answer under concurrent load differs from the same "
        "prompt answered alone, beyond noise_k × the baseline's own share. Measured on the "
        "reference engine (SmolLM2-135M on llama.cpp, concurrency 4, 2026-12-01, "
        "benchmarks/RESULTS.md): 0 of 40 distinct prompts differed (95 % upper bound 7 %), and "
        "0 of 8 on each side of three clean-vs-clean gate runs; batch-corrupt changes every "
        "answer that overlapped another request. 0.125 is one prompt in the default 8: a lone "
        "differing answer is not enough, two are. A server that varies with batch composition "
        "shows it on the baseline, and noise_k × that floor is added.",
    )
    embedding_cosine_distance: float = _key(
        1e-3,
        "1 − cosine",
        "How far an input's embedding may turn between baseline and candidate (1 − their "
        "cosine), beyond noise_k × the baseline's distance to itself (A/A, replica). The default "
        "keeps cosine ≥ 1 − 1e-3. Measured on the reference engine (SmolLM2-135M, llama.cpp, mean "
        "pooling): the same request twice gives bit-identical vectors (floor 0); the "
        "embed-perturb fault at its default moves every input by 5.0e-3.",
        ge=0.0,
    )
    score_deviation: float = _key(
        0.01,
        "score units",
        "How far a /score or /rerank score of one (query, document) pair may move between "
        "baseline and candidate, beyond noise_k × the baseline's own deviation. Cross-encoder "
        "scores are probabilities in [0, 1]; the ROCm backend bug shifted them by 8.5 % "
        "(vLLM #35569). Not measured against a real engine here: the reference engine has no "
        "score endpoint.",
        ge=0.0,
    )


class CanaryPolicy(_Frozen):
    """How the canary (`servegate proxy --mode canary`, docs/canary.md) judges each interval.

    It also applies `significance_alpha`, `error_rate_increase_max`, `p95_latency_regression_max`
    and `noise_k` from the top level, per interval, to live requests.
    """

    min_requests: int = _key(
        20,
        "requests per side and metric in an interval",
        "Fewer answers than this on either side and a metric is not measured in that interval, "
        "never passed; when the error rate, E2EL or garbage is not measured the interval is "
        "held (extended) instead of promoting blindly. The performance gate's minimum "
        "(performance_min_samples): a P95 of fewer values is one of its largest values.",
        ge=2,
    )
    max_extensions: int = _key(
        3,
        "intervals",
        "How many times one step may be held (a core check not measured: too few answers or "
        "latency blocks) before the "
        "canary rolls back: a candidate that cannot be judged is never promoted.",
        ge=0,
    )
    pass_score: float = _key(
        95.0,
        "score points (0-100)",
        "Presentation only: an interval's Kayenta-style score (the share of measured check "
        "weight that passed) at or above this is labelled pass in the evidence. The decision is "
        "the gates' rule on the checks. Kayenta's default pass mark.",
        ge=0.0,
        le=100.0,
    )
    marginal_score: float = _key(
        75.0,
        "score points (0-100)",
        "Presentation only: a score from here up to pass_score is labelled marginal, below it "
        "fail. The decision is the gates' rule on the checks. Kayenta's default marginal mark.",
        ge=0.0,
        le=100.0,
    )
    garbage_rate_increase_max: Fraction = _key(
        0.0,
        "fraction of answers",
        "How much the candidate's share of degenerate answers (the probes' severe-degeneration "
        "check) may exceed the primary's, once also significant (one-sided Fisher exact). Like "
        "every canary check, a failure rolls back whatever the score (the mixed-dtype engine "
        "answers garbage to every request).",
    )
    parse_failure_ratio_max: float = _key(
        2.0,
        "× the primary's rate",
        "The candidate's JSON and tool-call parse failure rates fail once this many times the "
        "primary's or more (a doubled rate; any significant failure rate when the primary has "
        "none). Critical metrics.",
        gt=1.0,
    )
    content_ratio_increase_max: Fraction = _key(
        0.05,
        "fraction (absolute)",
        "How much the candidate's empty-answer rate may exceed the primary's, once also "
        "significant (one-sided Fisher exact). The repeated-token and abnormal-character "
        "ratios are exported, not judged: severe cases are degenerate answers, which are.",
    )
    latency_block_requests: int = _key(
        5,
        "answers per block",
        "Canary latencies are judged per block, as the performance gate judges them: each "
        "side's ok answers of an interval, in arrival order, are cut into blocks of this many; "
        "the median block P95s are compared (Mann-Whitney U over block P95s). At least 4 "
        "blocks a side are needed for significance at alpha 0.05 (min_requests 20 gives 4).",
        ge=1,
    )

    candidate_timeout_factor: float = _key(
        3.0,
        "× the primary's P95",
        "The candidate's own deadlines in canary mode, as the gates scale a deadline by the "
        "baseline's latency (3×): a candidate request gives up after this many times the "
        "primary's P95 E2EL of its recent answers (total), or after this many times the "
        "primary's P95 longest wait for a byte (idle: before the headers or between chunks). "
        "A deadline hit is a timeout of the candidate, an error of its interval.",
        gt=1.0,
    )
    candidate_timeout_min_s: float = _key(
        5.0,
        "seconds",
        "The derived deadlines are never shorter than this: a primary that answers in "
        "milliseconds does not make a slower but healthy candidate a hang.",
        gt=0.0,
    )
    candidate_timeout_start_s: float = _key(
        60.0,
        "seconds",
        "The candidate's total and idle deadlines until the primary has min_requests answers "
        "to derive them from (a proxy that just started).",
        gt=0.0,
    )
    candidate_total_timeout_s: float | None = _key(
        None,
        "seconds",
        "A fixed total deadline for every candidate request in canary mode, instead of the "
        "derived one (null: derived).",
        gt=0.0,
    )
    candidate_idle_timeout_s: float | None = _key(
        None,
        "seconds",
        "A fixed idle deadline (no byte for this long, headers included) for every candidate "
        "request in canary mode, instead of the derived one (null: derived).",
        gt=0.0,
    )

    @model_validator(mode="after")
    def _marks_in_order(self) -> CanaryPolicy:
        if self.marginal_score > self.pass_score:
            raise ValueError("marginal_score must not exceed pass_score")
        return self


NumericsMeasurement = Literal["token_comparison", "prefix_dlogprob", "perplexity_shift"]


class NumericsPolicy(_Frozen):
    """Which numerics measurements the gate cannot pass without."""

    require: tuple[NumericsMeasurement, ...] = _key(
        ("token_comparison", "prefix_dlogprob", "perplexity_shift"),
        "measurements",
        "A required measurement that a server offers but that failed or could not be trusted "
        "(echo logprobs misaligned by every shift, garbage, an error) makes the gate "
        "inconclusive; one that is not required is listed as not measured. A measurement a "
        "server does not offer at all (no logprobs, no echo) is not applicable either way. "
        "Drop `perplexity_shift` to state that your server's prompt scoring is not to be "
        "relied on and drift is judged by tokens and margins alone.",
    )


class SamplingPolicy(_Frozen):
    """How the sampling gate judges sampled first tokens (docs/gates.md, "sampling")."""

    alpha: float = _key(
        0.001,
        "p-value, family-wise per check",
        "A sampling check fails a side when its test rejects at this level: each check's prompts "
        "are one family (Bonferroni: the smallest p times the number of prompts). Six checks "
        "a side make the gate's false-alarm rate at most about 0.6 % for two servers that "
        "sample alike; the faults it is for (a temperature replaced, sampled requests served "
        "greedily, top_p dropped) reach p below 1e-10 at the default draws. `servegate replay` "
        "and the proxy's /servegate/sampled judge sampled pairs at this level too (each of "
        "their seven checks; docs/proxy.md).",
        gt=0.0,
        lt=1.0,
    )
    min_expected: float = _key(
        5.0,
        "draws per bin",
        "Categories (tokens) expected fewer times than this are pooled before the chi-square "
        "tests (Cochran's rule); the tests' size at this rule is checked by simulation in the "
        "unit tests.",
        ge=1.0,
    )
    power: Fraction = _key(
        0.9,
        "probability",
        "Presentation: every passing check states the smallest temperature error (sampling at "
        "T·(1+x) or T/(1+x)) its test would have detected with at least this probability.",
    )


class Policy(_Frozen):
    """Verdict thresholds (servegate's defaults); a YAML policy file overrides them.

    Every key has a unit and a reason: docs/policy.md is generated from this class
    (`servegate policy`), and a test keeps the two equal.
    """

    canary_pass_rate: Fraction = _key(
        1.0,
        "fraction of usable canaries",
        "Deterministic canaries the baseline passes (and answers the same along its own paths) "
        "that the candidate must pass too: all of them by default.",
    )
    severe_degeneration_max: int = _key(
        0,
        "probes or answers",
        "Golden probes with severe degeneration (a same-character run, abnormal characters, "
        "punctuation soup, empty output) where the baseline had none; in the performance gate, "
        "answers under load that fail the load checks (degenerate, empty, an error with HTTP "
        "200, JSON or tool arguments that do not parse) where the baseline's answer to the same "
        "request passed.",
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
        "streamed vs not, alongside another request, a replica) a candidate may drift. With a "
        "canary's secondary, a shift held against the candidate must exceed this many times "
        "the secondary's shift.",
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
    load_early_divergence_words: int = _key(
        2,
        "words",
        "An answer under load that parts from the same prompt answered alone within its first "
        "this many words diverged early. A server that is not batch-invariant flips near-ties "
        "under load: on vLLM 0.32 (CPU, 2026-12-02) 4 of 8 greedy answers under concurrency 4 "
        "differed from the same prompt alone, so 'differs at all' cannot tell a batch-only "
        "corruption (batch-corrupt mirrors every word, 8 of 8 from the first word) from the "
        "baseline's own batching; where they part can. Judged paired by prompt (McNemar) against "
        "the baseline's own early divergences.",
        ge=1,
    )
    near_tie_margin_max_nats: float = _key(
        2.0,
        "nats",
        "The most the baseline's own self-flips (their median gap) may raise the near-tie limit. "
        "Measured on the reference engine: harmless kernel changes flip at gaps of 0.01-0.15 "
        "nats; the baseline's own cache-hit and repeat paths at up to 1.86 (numerics) and 1.99 "
        "(golden); the mixed-dtype bug's confident flips at 1.97-5.5. Uncapped, one odd "
        "self-flip of 4 nats switched off confident-flip detection for the whole run.",
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
    echo_alignment_max_nats: float = _key(
        0.1,
        "nats/token",
        "Echo (prompt) logprobs are used for perplexity and cross-scoring only when, on a "
        "greedy continuation, they equal the generation logprobs within this mean error, as "
        "returned or after a one-token shift (stock llama-cpp-python echoes one position "
        "late: 13.7 nats/token as returned, 0.00 shifted); when no shift aligns, not "
        "measured. Measured aligned servers: 0.000-0.005.",
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
    p95_latency_regression_max: float = _key(
        0.20,
        "fraction of the baseline's P95",
        "How much higher the candidate's P95 TTFT, TPOT or E2EL may be than the baseline's. "
        "Default +20 %. The performance gate fails a latency when the lower bound of its "
        "exact interval (block P95s, at the look's level of significance_alpha) is above "
        "1 + this, passes it when the upper bound is within, and otherwise runs more blocks "
        "(performance.max_blocks). The canary applies it to each interval's P95 TTFT and E2EL, "
        "when also significant.",
        ge=0.0,
    )
    throughput_drop_max: float = _key(
        0.10,
        "fraction of the baseline's throughput",
        "How much lower the candidate's output tokens/s (per load block) may be than the "
        "baseline's. Default −10 %. Fails when the upper bound of the block ratio's exact "
        "interval is below 1 − this, passes when the lower bound is within.",
        ge=0.0,
        lt=1.0,
    )
    error_rate_increase_max: Fraction = _key(
        0.01,
        "fraction of requests (0.01 = 1 point)",
        "How much the candidate's error rate under load may exceed the baseline's before it can "
        "fail, and only when also significant (one-sided Fisher exact test). Default +1 point. "
        "The canary applies it to each interval's error and timeout rates, with the same test.",
    )
    performance_aa_k: float = _key(
        1.0,
        "× A/A deviation",
        "With a baseline replica (`--baseline-replica`) measured in the same interleaved blocks, "
        "each performance limit widens by this many times the baseline's own deviation d from "
        "its replica (d = max(r, 1/r) − 1, r = replica / baseline of the same statistic): a "
        "latency may reach (1 + p95_latency_regression_max) × (1 + k·d) of the baseline's, "
        "throughput (1 − throughput_drop_max) / (1 + k·d). Measured on the reference engine "
        "(2026-12-01, benchmarks/RESULTS.md): two identical llama.cpp processes on the shared "
        "2-core machine differed by up to 1.26× for a whole run, a difference between processes "
        "that interleaving cannot cancel and the candidate's ratio carries too. Without a "
        "replica the floor is not measured and the limits are not widened.",
        ge=0.0,
    )
    performance_aa_max: float = _key(
        0.25,
        "A/A deviation d",
        "The largest A/A deviation d (see performance_aa_k) for which a performance metric is "
        "judged at all: beyond it the baseline and its replica differ so much that the widened "
        "limit has no teeth, and the metric is not measured (the gate inconclusive) instead of "
        "passed. 0.25 keeps the widened latency limit at most 1.20 × 1.25 = 1.5× the "
        "baseline's. Measured on the reference engine (2026-12-01, benchmarks/RESULTS.md, load "
        "average 4-14): replicas differed by d 0.04-0.16 in two of three clean runs, which "
        "stay judged, as does the slow-fault run (d ≤ 0.09, still a failure); the third run "
        "(d 0.53 for TTFT, 0.45 E2EL, 0.32 throughput) is inconclusive under this key: its "
        "TTFT limit had widened to 1.84×, so a candidate 80 % slower would have passed.",
        ge=0.0,
    )
    capacity_attainment_drop_max: float = _key(
        0.5,
        "share of requests",
        "How much lower the candidate's share of requests meeting the SLO may be than the "
        "baseline's, at the concurrency where the candidate first missed it, before the max "
        "concurrency under SLO row can fail, and only when also significant (one-sided Fisher "
        "exact, significance_alpha): the SLO row's effect-size band, as the other performance "
        "rows have theirs. 0.5 is twice the largest drop measured between two clean reference "
        "engines (0.25: 12/16 against 16/16 at the step an e2el_ms=5000 SLO sat on, 7 runs, "
        "2026-12-01, benchmarks/RESULTS.md), where a burst of load on a shared machine hit one "
        "side's step; a capacity regression takes most of a step's requests past the SLO (the "
        "slow fault layer: 1.0).",
        ge=0.0,
        le=1.0,
    )
    significance_alpha: float = _key(
        0.05,
        "p-value",
        "A performance shift fails only when its one-sided test is below this level as well "
        "as beyond its threshold (Kayenta style): one noisy run cannot roll back a release. "
        "Error rates: Fisher exact. Latencies and throughput: the exact interval of the block "
        "ratio (the inverted Mann-Whitney U), each bound one-sided at a look's share of this "
        "level; the performance gate's looks spend it by a Pocock-type rule, so looking after "
        "6, 8, 10 and 12 blocks a side keeps the false-alarm rate at most this level. The "
        "canary tests every metric of an interval at this level.",
        gt=0.0,
        lt=1.0,
    )
    served_incomplete_share_max: Fraction = _key(
        0.1,
        "fraction of answers",
        "Before its blocks the performance gate sends the baseline the asked concurrency; when "
        "more than this share of its answers come back cut short or empty (stock "
        "llama-cpp-python interrupts the stream in flight for every new request: 3 of 4 at "
        "concurrency 4), it is tried at half the concurrency, down to 1, and the blocks run at "
        "the highest concurrency it served whole — reported as a finding, never a pass of the "
        "asked concurrency.",
    )
    performance_min_samples: int = _key(
        20,
        "successful requests per side",
        "Fewer successful measured requests than this on either side and a latency metric is "
        "not measured (the gate is inconclusive), never passed: a P95 of a handful of values "
        "is one of its largest values.",
        ge=2,
    )
    tolerance: Tolerance = Field(
        default_factory=Tolerance,
        description="The drift tolerance for any model without an entry in `models`.",
    )
    canary: CanaryPolicy = Field(
        default_factory=CanaryPolicy,
        description="How the canary judges each interval (docs/canary.md).",
    )
    numerics: NumericsPolicy = Field(
        default_factory=NumericsPolicy,
        description="Which numerics measurements are required.",
    )
    sampling: SamplingPolicy = Field(
        default_factory=SamplingPolicy,
        description="How sampled first tokens are judged (the sampling gate).",
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
