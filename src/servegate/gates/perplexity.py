"""Perplexity and cross-scoring: is the candidate's distribution systematically worse?

Greedy tokens can stay identical while every next-token distribution moves (a wrong logit scale
flattens them all), and they can flip at near-ties while nothing is wrong (a kernel change).
The direction of drift is read from teacher-forced NLL:

- **perplexity shift**: the fixed reference texts shipped in `probes/reference/` (several
  languages and code, about 3,000 tokens) are echoed with logprobs on both sides; the per-token
  differences (candidate − baseline) on identical tokens give the mean shift, its batch-means
  standard error and z;
- **cross-scoring**: where greedy answers diverged, each side's text is scored by the other
  (`,,,,,,,,` after a fused-kernel bug is several nats/token less likely than the baseline's text).

Both need echo logprobs that line up with generation logprobs. `alignment` measures that on a
greedy continuation (llama-cpp-python 0.3.16 upstream reports them one position late for models
without BOS); the judgement of whether they line up belongs to `numerics.evaluate`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from servegate.endpoints.protocol import Endpoint
from servegate.endpoints.types import Completion, TokenLogprob
from servegate.gates.pair import EndpointPair
from servegate.stats.shift import PairedShift

NAME = "numerics"
# Greedy continuations of these are echoed back; the first whose tokens survive the round trip
# measures the alignment (a garbage continuation may merge into other tokens when re-tokenized).
ALIGNMENT_PROMPTS = (
    "1, 2, 3, 4, 5, 6, 7,",
    "The capital of France is",
    "Once upon a time, in a small village,",
)


@cache
def reference_texts() -> tuple[tuple[str, str], ...]:
    """(id, text) of every shipped reference text, in name order."""
    folder = resources.files("servegate.probes") / "reference"
    items = sorted((p.name, p) for p in folder.iterdir() if p.name.endswith(".txt"))
    return tuple((name.removesuffix(".txt"), p.read_text(encoding="utf-8")) for name, p in items)


def echo_body(text: str) -> dict[str, Any]:
    """Score `text` token by token: its echoed prompt logprobs, one token generated."""
    return {"prompt": text, "max_tokens": 1, "temperature": 0, "echo": True, "logprobs": 1}


async def _send(
    pair: EndpointPair, ep: Endpoint, body: dict[str, Any], probe: str, deadline_s: float
) -> Completion:
    return await pair.send(ep, "completions", body, gate=NAME, probe=probe, deadline_s=deadline_s)


async def _alignment_on(
    pair: EndpointPair, ep: Endpoint, prompt: str, deadline_s: float
) -> tuple[float | None, str]:
    body = {"prompt": prompt, "max_tokens": 6, "temperature": 0, "logprobs": 1}
    gen = await _send(pair, ep, body, "align", deadline_s)
    if not gen.ok or not gen.logprobs or not gen.text:
        return None, f"no greedy continuation with logprobs ({describe_error(gen)})"
    echoed = await _send(pair, ep, echo_body(prompt + gen.text), "align", deadline_s)
    if not echoed.ok or not echoed.prompt_logprobs:
        return None, f"no echo logprobs ({describe_error(echoed)})"
    tail = echoed.prompt_logprobs[-len(gen.logprobs) :]
    if [t.token if t else None for t in tail] != [g.token for g in gen.logprobs]:
        return None, "the continuation re-tokenizes differently when echoed"
    pairs = zip(tail, gen.logprobs, strict=True)
    return sum(abs(t.logprob - g.logprob) for t, g in pairs if t is not None) / len(tail), ""


async def alignment(
    pair: EndpointPair, ep: Endpoint, deadline_s: float
) -> tuple[float | None, str]:
    """Mean |echo logprob − generation logprob| over a greedy continuation, echoed with the same
    tokens; (None, why) when no echo logprobs came back or no continuation re-tokenized the same.
    """
    why = ""
    for prompt in ALIGNMENT_PROMPTS:
        error, why = await _alignment_on(pair, ep, prompt, deadline_s)
        if error is not None or why.startswith("no echo"):
            return error, why
    return None, why


def describe_error(result: Completion) -> str:
    return f"{result.error.category}: {result.error.message[:120]}" if result.error else "empty"


@dataclass(frozen=True)
class TextScore:
    """One reference text echoed by both sides."""

    text_id: str
    baseline: Completion
    candidate: Completion


async def score_texts(
    pair: EndpointPair, deadline_s: float, texts: Sequence[tuple[str, str]] | None = None
) -> tuple[TextScore, ...]:
    """Echo every reference text on the baseline and on the candidate (at once when the pair
    allows it)."""
    out = []
    for text_id, text in reference_texts() if texts is None else texts:
        probe = f"perplexity:{text_id}"
        b, c = await pair.both(
            "completions", echo_body(text), gate=NAME, probe=probe, deadline_s=deadline_s
        )
        out.append(TextScore(text_id, b, c))
    return tuple(out)


def token_nlls(result: Completion) -> list[tuple[str, float]] | None:
    """(token, NLL) of every scored prompt token (the first has no context and is skipped)."""
    if not result.ok or not result.prompt_logprobs:
        return None
    return [(e.token, -e.logprob) for e in result.prompt_logprobs if e is not None]


@dataclass(frozen=True)
class ShiftResult:
    """The paired NLL shift over the texts both sides tokenized identically."""

    shift: PairedShift
    baseline_nll: float | None  # mean NLL per token of the baseline on those tokens
    texts_compared: tuple[str, ...]
    texts_unscored: tuple[str, ...]  # a side returned no prompt logprobs
    texts_tokenized_differently: tuple[str, ...]
    argmax_flip_rate: float | None = None  # positions whose top-1 token differs between sides
    mean_abs_dlogprob: float | None = None  # |Δ| of the text's own token's logprob, per token


def _top1(entry: TokenLogprob) -> str:
    return max((*entry.top, (entry.token, entry.logprob)), key=lambda t: t[1])[0]


def perplexity_shift(scores: Sequence[TextScore]) -> ShiftResult:
    """Per-token NLL differences (candidate − baseline) grouped by text, with the share of
    positions whose top-1 token differs (argmax flips under teacher forcing)."""
    groups: list[list[float]] = []
    base: list[float] = []
    flips: list[bool] = []
    compared, unscored, differ = [], [], []
    for s in scores:
        b, c = token_nlls(s.baseline), token_nlls(s.candidate)
        if not b or not c:
            unscored.append(s.text_id)
        elif [t for t, _ in b] != [t for t, _ in c]:
            differ.append(s.text_id)
        else:
            groups.append([y - x for (_, x), (_, y) in zip(b, c, strict=True)])
            base += [x for _, x in b]
            compared.append(s.text_id)
            entries = (s.baseline.prompt_logprobs or (), s.candidate.prompt_logprobs or ())
            pairs = zip(*entries, strict=True)  # same tokens, so the same length
            flips += [_top1(x) != _top1(y) for x, y in pairs if x is not None and y is not None]
    diffs = [abs(d) for g in groups for d in g]
    return ShiftResult(
        PairedShift.from_groups(groups),
        sum(base) / len(base) if base else None,
        tuple(compared),
        tuple(unscored),
        tuple(differ),
        sum(flips) / len(flips) if flips else None,
        sum(diffs) / len(diffs) if diffs else None,
    )


@dataclass(frozen=True, slots=True)
class CrossScore:
    """Mean NLL per token (nats) of each side's greedy text, scored by each side."""

    baseline_on_baseline: float | None  # the baseline scoring its own text
    baseline_on_candidate: float | None  # the baseline scoring the candidate's text
    candidate_on_candidate: float | None
    candidate_on_baseline: float | None  # the candidate scoring the baseline's text

    @property
    def excess_nats(self) -> float | None:
        """How much less likely the baseline finds the candidate's text than its own."""
        b, c = self.baseline_on_baseline, self.baseline_on_candidate
        return None if b is None or c is None else c - b

    @property
    def teacher_forced_dnll_nats(self) -> float | None:
        """How much worse the candidate predicts the baseline's text than the baseline does."""
        b, c = self.baseline_on_baseline, self.candidate_on_baseline
        return None if b is None or c is None else c - b


def tail_nll(entries: Sequence[TokenLogprob | None] | None, text: str) -> float | None:
    """Mean NLL per token of the echoed tokens that spell the final `text`; None if unknown."""
    if not entries or not text:
        return None
    covered, values = 0, []
    for entry in reversed(entries):
        if covered >= len(text):
            break
        if entry is None or not math.isfinite(entry.logprob):
            return None
        values.append(-entry.logprob)
        covered += len(entry.token)
    return sum(values) / len(values) if covered >= len(text) else None


async def cross_score(
    pair: EndpointPair,
    probe: str,
    prompt: str,
    b_text: str,
    c_text: str,
    deadline_s: float,
    *,
    candidate_scores: bool = True,
) -> CrossScore:
    """Both greedy texts, after the probe's prompt, scored by both sides (by the baseline only
    when `candidate_scores` is false: a candidate without echo logprobs has nothing to say)."""

    async def by(ep: Endpoint, text: str) -> float | None:
        r = await _send(pair, ep, echo_body(f"{prompt}\n{text}"), f"score:{probe}", deadline_s)
        return tail_nll(r.prompt_logprobs, text) if r.ok else None

    async def on(ep: Endpoint, own: str, other: str) -> tuple[float | None, float | None]:
        return await by(ep, own), await by(ep, other)

    async def unscored() -> tuple[float | None, float | None]:
        return None, None

    (bb, bc), (cc, cb) = await pair.sides(
        lambda: on(pair.baseline, b_text, c_text),
        (lambda: on(pair.candidate, c_text, b_text)) if candidate_scores else unscored,
    )
    return CrossScore(
        baseline_on_baseline=bb,
        baseline_on_candidate=bc,
        candidate_on_candidate=cc,
        candidate_on_baseline=cb,
    )
