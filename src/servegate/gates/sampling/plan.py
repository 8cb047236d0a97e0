"""What the sampling gate sends, and what it saw (no judgement here).

First-token draws (max_tokens 1, top logprobs on) of chat prompts whose first token is uncertain,
in cells: temperature 1 with every other sampler neutral (the reference: each side's own report
of the distribution), temperatures 0.5 and 1.5, and top_p, top_k and min_p each at temperature
1 with a value chosen from the baseline's temperature-1 report so that the kept set is clear of
every boundary. Every draw of a cell is the same request.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from servegate.endpoints.types import Completion
from servegate.gates.batching import Batching
from servegate.gates.sampling.sequences import SEEDS, SequenceDraws

NAME = "sampling"

# Chat prompts whose first answer token is spread over several likely tokens, most of its mass
# in the top 20 (SmolLM2-135M on llama.cpp: 0.75-0.82 reported, the top token 0.16-0.42).
PROMPTS: tuple[tuple[str, str], ...] = (
    ("instrument", "Name a musical instrument."),
    ("coin", "Flip a coin: heads or tails?"),
    ("weekday", "Name a day of the week."),
    ("city", "Name a city in Europe."),
)
TOP_LOGPROBS = 20  # OpenAI's and vLLM's (max_logprobs) largest
# Everything but the temperature neutral, under every name engines use: llama.cpp's server
# defaults to top_k 40, top_p 0.95, min_p 0.05 and repeat_penalty 1.1 (so its temperature-1
# draws would not follow its own report without these), vLLM's to none of them. "No top-k" is
# 0 for llama.cpp (which refuses -1) and -1 for vLLM before 0.9 (which refuses 0). A server that
# refuses extensions gets OpenAI's own keys only. The pilot keeps the first a side answers.
OPENAI_NEUTRAL: Mapping[str, Any] = {"top_p": 1.0, "presence_penalty": 0.0,
                                     "frequency_penalty": 0.0}  # fmt: skip
EXTENDED_NEUTRAL: Mapping[str, Any] = {
    **OPENAI_NEUTRAL, "min_p": 0.0, "repeat_penalty": 1.0, "repetition_penalty": 1.0,
}  # fmt: skip
NEUTRALS: tuple[Mapping[str, Any], ...] = (
    {**EXTENDED_NEUTRAL, "top_k": 0},
    {**EXTENDED_NEUTRAL, "top_k": -1},
    EXTENDED_NEUTRAL,
    OPENAI_NEUTRAL,
)


class Kind(StrEnum):
    """What a cell tests."""

    REFERENCE = "t1"  # temperature 1, neutral: frequencies against the side's own report
    TEMPERED = "tempered"  # another temperature: the tempered report must predict them
    TOP_P = "top_p"
    TOP_K = "top_k"
    MIN_P = "min_p"
    BAN = "ban"  # logit_bias −100 on the most likely token (bias.py)
    FORCE = "force"  # logit_bias +100 on an unlikely one


TRUNCATIONS = (Kind.TOP_P, Kind.TOP_K, Kind.MIN_P)


# The fewest draws (or repeats) a scaled plan gives any cell (SamplingPlan.scaled), and a
# truncation cell: min_p's kept set was "too few draws for two bins" at 12 (2026-12-07).
MIN_SCALED = 3
MIN_TRUNCATION_DRAWS = 24


@dataclass(frozen=True)
class SamplingPlan:
    """How many draws of what; every threshold lives in `Policy.sampling`.

    Cost on the reference engine (2 cores, idle): 30-60 ms a draw, so the default plan's
    4 × (96 + 2 × 48) + 3 × 2 × 48 + 2 × 24 = 1,104 draws take 30-60 s a side, the sides at once."""

    prompts: tuple[tuple[str, str], ...] = PROMPTS
    reference_draws: int = 96
    temperatures: tuple[float, ...] = (0.5, 1.5)
    tempered_draws: int = 48
    truncations: tuple[Kind, ...] = TRUNCATIONS
    truncation_prompts: int = 2  # the first prompts with a clear kept set
    truncation_draws: int = 48
    # In flight per side: every first-token draw, and the longer answers on a side that serves
    # one at a time (a queue loses nothing); the longer answers on a side that batches
    # (`sampling_answer_concurrency: auto`).
    concurrency: int = 4
    batched_concurrency: int = 16
    # Longer answers (sequences.py): seeds each asked twice and streamed once, n > 1 asked
    # `choices_requests` times and streamed once, each penalty `penalty_draws` times and as
    # many without. Empty / 0 leaves that check out.
    seeds: tuple[int, ...] = SEEDS
    choices_requests: int = 2
    penalty_draws: int = 10
    bias_draws: int = 24  # each of the logit_bias cells (bias.py); 0 leaves the check out
    # Each production-settings probe (production.py) this many times a side; 0 leaves them out.
    production_repeats: int = 10

    def __post_init__(self) -> None:
        if min(self.reference_draws, self.tempered_draws, self.truncation_draws) < 1:
            raise ValueError("every cell needs at least one draw")
        counts = (self.choices_requests, self.penalty_draws, self.bias_draws,
                  self.production_repeats)  # fmt: skip
        if min(counts) < 0:
            raise ValueError(
                "choices_requests, penalty_draws, bias_draws and production_repeats must not be "
                "negative"
            )
        if min(self.concurrency, self.batched_concurrency) < 1:
            raise ValueError("concurrency must be at least 1")
        if any(t <= 0 or t == 1.0 for t in self.temperatures):
            raise ValueError("tempered cells are at temperatures above 0 other than 1")

    def scaled(self, share: float) -> SamplingPlan:
        """This plan with every cell's draws times `share`, rounded up and at least MIN_SCALED
        (a truncation cell MIN_TRUNCATION_DRAWS; a count already below its minimum, or 0, is
        kept): the whole plan at 1. The prompts, temperatures, truncations, seeds, penalty
        answers and production repeats stay: what is checked stays, each first-token check on
        fewer draws. Production's checks need 10 repeats of a request to be measured at all;
        the penalty checks were measured: with 3 answers each (a quarter) the stripped
        penalties passed on the reference engine where 10 fail them (2 of 2, 2026-12-07,
        benchmarks/RESULTS-sampling.md), their stated power at 3 answers 0.02-0.25."""
        if not 0.0 < share <= 1.0:
            raise ValueError(f"share must be in (0, 1], not {share}")

        def part(n: int, least: int = MIN_SCALED) -> int:
            return min(n, max(least, math.ceil(n * share)))

        return replace(
            self,
            reference_draws=part(self.reference_draws),
            tempered_draws=part(self.tempered_draws),
            truncation_draws=part(self.truncation_draws, MIN_TRUNCATION_DRAWS),
            bias_draws=part(self.bias_draws),
        )


def draw_request(prompt: str, temperature: float, extra: Mapping[str, Any]) -> dict[str, Any]:
    """One first-token draw: the prompt, max_tokens 1, top logprobs, the sampler as given."""
    return {
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": 1,
        "temperature": temperature,
        "logprobs": True,
        "top_logprobs": TOP_LOGPROBS,
        **extra,
    }


@dataclass(frozen=True)
class Cell:
    """One request drawn `draws` times on each side. `params` are the sampler settings under
    test (temperature, top_p, top_k or min_p); the rest of the sampler is each side's neutral
    (one of NEUTRALS)."""

    probe: str  # e.g. "coin:t1", "coin:t0.5", "coin:top_p"
    prompt_id: str
    prompt: str
    kind: Kind
    temperature: float
    params: Mapping[str, Any]
    draws: int

    def request(self, neutral: Mapping[str, Any]) -> dict[str, Any]:
        """The request as a side with this neutral sampler gets it."""
        return draw_request(self.prompt, self.temperature, {**neutral, **self.params})


def reference_cells(plan: SamplingPlan) -> list[Cell]:
    """The temperature-1 cells: each side's report comes from these."""
    return [Cell(f"{pid}:t1", pid, text, Kind.REFERENCE, 1.0, {}, plan.reference_draws)
            for pid, text in plan.prompts]  # fmt: skip


def tempered_cells(plan: SamplingPlan) -> list[Cell]:
    return [
        Cell(f"{pid}:t{t:g}", pid, text, Kind.TEMPERED, t, {}, plan.tempered_draws)
        for t in plan.temperatures
        for pid, text in plan.prompts
    ]


# --- the kept sets of top_p, top_k and min_p -----------------------------------------------------

# How far from every boundary a chosen value must be, so that the small drift between two
# engines' reports (|Δlogprob| ≈ 0.06 nats on harmless kernel paths) cannot move a token across.
# For top_p: probability mass; for top_k and min_p: a ratio of neighbouring probabilities.
MASS_MARGIN = 0.03
RATIO_MARGIN = 1.25
SET_SIZES = (2, 3, 4, 5)  # kept sets tried, smallest first: small sets leave much mass out


@dataclass(frozen=True)
class Reported:
    """One side's report of a first-token distribution at temperature 1: the reported tokens,
    most likely first, their probabilities, and the unreported rest (1 − their sum)."""

    tokens: tuple[str, ...]
    probs: tuple[float, ...]

    @property
    def rest(self) -> float:
        return max(0.0, 1.0 - sum(self.probs))

    def prob(self, token: str) -> float | None:
        return dict(zip(self.tokens, self.probs, strict=True)).get(token)


def kept(report: Reported, kind: Kind, value: float) -> tuple[str, ...] | None:
    """The tokens `kind` at `value` keeps at temperature 1 by this report, or None when the
    set reaches past the reported tokens or a token sits within the margin of its boundary."""
    p = report.probs
    if kind is Kind.TOP_K:
        k = int(value)
        if not 0 < k < len(p) or p[k - 1] < RATIO_MARGIN * p[k]:
            return None
        return report.tokens[:k]
    if kind is Kind.TOP_P:
        cumulative = 0.0
        for i, q in enumerate(p):
            below = cumulative
            cumulative += q
            if cumulative >= value:  # the smallest prefix reaching top_p
                if value - below < MASS_MARGIN or cumulative - value < MASS_MARGIN:
                    return None
                return report.tokens[: i + 1]
        return None
    if kind is Kind.MIN_P:
        floor = value * p[0]
        inside = [i for i, q in enumerate(p) if q >= floor]
        k = len(inside)
        if k == len(p) or p[k - 1] < RATIO_MARGIN * floor or floor < RATIO_MARGIN * p[k]:
            return None
        return report.tokens[:k]
    raise ValueError(f"{kind} keeps no set")


def truncation_value(report: Reported, kind: Kind) -> float | None:
    """A value of `kind` whose kept set is 2-5 tokens clear of every margin, the smallest such
    set first; None when no set size is clear."""
    p = report.probs
    for k in SET_SIZES:
        if k >= len(p):
            break
        if kind is Kind.TOP_K:
            value: float = k
        elif kind is Kind.TOP_P:
            value = round(sum(p[: k - 1]) + p[k - 1] / 2, 4)  # halfway through the k-th token
        else:
            value = round(math.sqrt(p[k - 1] * p[k]) / p[0], 4)  # between the k-th and next
        if kept(report, kind, value) is not None:
            return value
    return None


def truncation_cells(plan: SamplingPlan, baseline: Mapping[str, Reported]) -> list[Cell]:
    """top_p, top_k and min_p cells on the first `truncation_prompts` prompts for which the
    baseline's report gives each a clear kept set."""
    cells = []
    for kind in plan.truncations:
        chosen = 0
        for pid, text in plan.prompts:
            report = baseline.get(pid)
            value = truncation_value(report, kind) if report is not None else None
            if value is None or chosen >= plan.truncation_prompts:
                continue
            chosen += 1
            param = int(value) if kind is Kind.TOP_K else value
            cells.append(Cell(f"{pid}:{kind}", pid, text, kind, 1.0, {str(kind): param},
                              plan.truncation_draws))  # fmt: skip
    return cells


# --- logit_bias ------------------------------------------------------------------------------

BAN, FORCE = -100, 100


@dataclass(frozen=True)
class BiasTarget:
    """The tokens `logit_bias` is tried with, their ids (equal on both sides) and the
    probabilities the baseline's temperature-1 report gives them."""

    prompt_id: str
    prompt: str
    banned: str
    banned_id: int
    banned_p: float
    forced: str
    forced_id: int
    forced_p: float

    def cells(self, draws: int) -> list[Cell]:
        ban = {"logit_bias": {str(self.banned_id): BAN}}
        force = {"logit_bias": {str(self.forced_id): FORCE}}
        return [
            Cell(f"{self.prompt_id}:ban", self.prompt_id, self.prompt, Kind.BAN, 1.0, ban, draws),
            Cell(f"{self.prompt_id}:force", self.prompt_id, self.prompt, Kind.FORCE, 1.0, force,
                 draws),
        ]  # fmt: skip


# --- what was seen ---------------------------------------------------------------------------


@dataclass(frozen=True)
class SideSetup:
    """How one side was asked: the first of NEUTRALS it answered (the last when none was), what
    the pilot showed (its answer to each one tried, in order), and how many of its longer
    answers went at once (`batching`: the measurement that chose it, when
    `sampling_answer_concurrency` is auto)."""

    neutral: Mapping[str, Any]
    logprobs: bool  # the pilot's draw came back with top logprobs
    tried: tuple[str, ...] = ()
    concurrency: int = 4
    batching: Batching | None = None

    @property
    def measuring_requests(self) -> int:
        """Requests the batching measurement sent this side (one alone, then `width`)."""
        return 0 if self.batching is None else 1 + self.batching.width

    @property
    def text(self) -> str:
        return ", ".join(f"{k} {v}" for k, v in self.neutral.items())


@dataclass(frozen=True)
class CellDraws:
    """One cell's draws on both sides, with the request each side was sent."""

    cell: Cell
    baseline_request: Mapping[str, Any]
    candidate_request: Mapping[str, Any]
    baseline: tuple[Completion, ...]
    candidate: tuple[Completion, ...]

    def side(self, name: str) -> tuple[Completion, ...]:
        return self.baseline if name == "baseline" else self.candidate

    def request(self, name: str) -> Mapping[str, Any]:
        return self.baseline_request if name == "baseline" else self.candidate_request


@dataclass(frozen=True)
class SamplingEvidence:
    cells: tuple[CellDraws, ...]
    setup: Mapping[str, SideSetup]
    baseline_url: str
    candidate_url: str
    model: str | None = None
    plan: SamplingPlan = field(default_factory=SamplingPlan)
    seconds: float = 0.0  # wall time of the gate's requests
    first_token_seconds: float = 0.0  # of which the pilots and the first-token draws
    # Kinds of truncation cell left out, and why (no prompt gave a clear kept set).
    unplanned: tuple[tuple[str, str], ...] = ()
    sequences: tuple[SequenceDraws, ...] = ()
    bias: BiasTarget | None = None  # the logit_bias cells' tokens (their draws are in `cells`)
    bias_unplanned: str = ""  # why no logit_bias cell was planned
