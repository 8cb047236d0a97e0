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
greedy continuation (stock llama-cpp-python reports them one position late for models without
BOS); which route each side's scores are read through — as returned, shifted by one, or none —
is judged by `echo_route.choose` in `numerics.evaluate`, and every consumer here takes that route.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cache
from importlib import resources
from typing import Any

from servegate.endpoints.errors import ErrorCategory
from servegate.endpoints.protocol import Endpoint
from servegate.endpoints.types import Completion, TokenLogprob
from servegate.gates.numerics.echo_route import (
    FFFD,
    TOP_K,
    EchoCheck,
    ScoringRoute,
    measure,
    realign,
)
from servegate.gates.numerics.noise import NAME
from servegate.gates.pair import EndpointPair
from servegate.stats.shift import PairedShift

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


# Top-k per echoed position: a server whose echo is one token late (stock llama-cpp-python) is
# read through the previous position's top-k, so k sets how many of its tokens can be scored.
# 5 is the most OpenAI's legacy completions API allows.
ECHO_TOP_K = TOP_K
# Token positions of the perplexity shift by bucket: quantization errors of a KV cache grow with
# the context, so a shift that only long positions show is reported where it is.
POSITION_BUCKETS = ((0, 256), (256, 1024), (1024, 4096), (4096, 1 << 30))


def echo_body(text: str) -> dict[str, Any]:
    """Score `text` token by token: its echoed prompt logprobs, one token generated."""
    return {"prompt": text, "max_tokens": 1, "temperature": 0, "echo": True, "logprobs": ECHO_TOP_K}


def native_body(text: str) -> dict[str, Any]:
    """Score `text` through the server's own prompt scoring (vLLM's `prompt_logprobs`)."""
    return {"prompt": text, "max_tokens": 1, "temperature": 0, "prompt_logprobs": ECHO_TOP_K}


def scoring_body(check: EchoCheck | None, text: str) -> dict[str, Any]:
    """The request that scores `text` on a side: native where it answered one, else echo."""
    return native_body(text) if check is not None and check.native else echo_body(text)


async def _send(
    pair: EndpointPair, ep: Endpoint, body: dict[str, Any], probe: str, deadline_s: float
) -> Completion:
    return await pair.send(ep, "completions", body, gate=NAME, probe=probe, deadline_s=deadline_s)


async def _alignment_on(
    pair: EndpointPair, ep: Endpoint, prompt: str, deadline_s: float
) -> EchoCheck:
    body = {"prompt": prompt, "max_tokens": 6, "temperature": 0, "logprobs": 1}
    gen = await _send(pair, ep, body, "align", deadline_s)
    if gen.ok and gen.text and not gen.logprobs:
        return EchoCheck.not_offered("the server returns no completion logprobs")
    if not gen.ok or not gen.logprobs or not gen.text:
        return EchoCheck(offered=True, note=f"no greedy continuation ({describe_error(gen)})")
    text = prompt + gen.text
    native = await _send(pair, ep, native_body(text), "align:native", deadline_s)
    native_check = measure(gen, native, len(text)) if native.ok else None
    native_nats = native_check.errors_nats.get(0) if native_check is not None else None
    echoed = await _send(pair, ep, echo_body(text), "align", deadline_s)
    if echoed.error is not None and echoed.error.category is ErrorCategory.REJECTED:
        check = EchoCheck.not_offered(f"echo with logprobs refused ({describe_error(echoed)})")
    elif not echoed.ok:
        why = f"the echo request failed ({describe_error(echoed)})"
        check = EchoCheck(offered=True, note=why)
    else:
        check = measure(gen, echoed, len(text))
    rate = check.seconds_per_char
    if native_nats is not None and native_check is not None:
        rate = native_check.seconds_per_char  # the route the texts will take
    note = (
        "" if native_nats is not None else f"no native prompt_logprobs ({describe_error(native)})"
    )
    return replace(check, native_nats=native_nats, native_note=note, seconds_per_char=rate)


def scoring_deadline_s(
    checks: Sequence[EchoCheck], chars: int, deadline_s: float, factor: float, cap_s: float
) -> float:
    """The deadline of an echo of `chars` characters: `factor` × the slower side's measured
    echo time per character (an overestimate: the alignment echo is short, its fixed cost
    included), never below `deadline_s`, never above `cap_s`."""
    rates = [c.seconds_per_char for c in checks if c.seconds_per_char is not None]
    if not rates:
        return deadline_s
    return min(cap_s, max(deadline_s, factor * max(rates) * chars))


async def alignment(pair: EndpointPair, ep: Endpoint, deadline_s: float) -> EchoCheck:
    """One side's echo logprobs against its generation logprobs of a greedy continuation echoed
    with the same tokens (the first prompt whose continuation survives re-tokenization)."""
    check = EchoCheck(offered=True, note="no alignment prompt")
    for prompt in ALIGNMENT_PROMPTS:
        check = await _alignment_on(pair, ep, prompt, deadline_s)
        if not check.offered or check.errors_nats or "re-tokenizes" not in check.note:
            return check
    return check


def describe_error(result: Completion) -> str:
    return f"{result.error.category}: {result.error.message[:120]}" if result.error else "empty"


@dataclass(frozen=True)
class TextScore:
    """One reference text echoed by both sides."""

    text_id: str
    baseline: Completion
    candidate: Completion


LONG_TEXT_ID = "reference-joined"


def long_text() -> tuple[str, str]:
    """Every shipped reference text in one, in name order: ~2,950 tokens of SmolLM2, so the
    shift is measured at long positions too (a quantized KV cache's error grows with the
    context: on real vLLM with an fp8 KV cache, ΔNLL +0.032 (z +4.8) over a 1,499-token text,
    +0.006 (z +0.9) over the ~370-token texts scored apart)."""
    return LONG_TEXT_ID, "\n\n".join(text for _, text in reference_texts())


def _too_long(result: Completion) -> bool:
    error = result.error
    return error is not None and error.category in (
        ErrorCategory.REJECTED,
        ErrorCategory.ERROR_BODY,
    )


Deadline = Callable[[int], float]


async def _both(
    pair: EndpointPair,
    checks: Mapping[str, EchoCheck],
    text: str,
    probe: str,
    deadline_s: float,
) -> tuple[Completion, Completion]:
    """`text` scored on both sides, each through its own request (native or echo), at once when
    the pair allows it; the candidate's deadline scaled to the baseline's latency."""
    reference: asyncio.Future[Completion] = asyncio.get_running_loop().create_future()

    async def baseline() -> Completion:
        body = scoring_body(checks.get("baseline"), text)
        b = await pair.send(
            pair.baseline, "completions", body, gate=NAME, probe=probe, deadline_s=deadline_s
        )
        reference.set_result(b)
        return b

    async def candidate() -> Completion:
        body = scoring_body(checks.get("candidate"), text)
        return await pair.send_against(
            pair.candidate, "completions", body, gate=NAME, probe=probe,
            deadline_s=deadline_s, reference=reference,
        )  # fmt: skip

    return await pair.sides(baseline, candidate)


@dataclass(frozen=True)
class Scored:
    """The texts scored, and those left out because the scoring budget would not hold them."""

    texts: tuple[TextScore, ...]
    skipped: tuple[str, ...] = ()
    note: str = ""


async def score_texts(
    pair: EndpointPair,
    deadline: Deadline,
    checks: Mapping[str, EchoCheck],
    texts: Sequence[tuple[str, str]] | None = None,
    *,
    budget_s: float = math.inf,
) -> Scored:
    """Score the reference texts on the baseline and on the candidate: joined into one long
    text when the sides' measured scoring speed fits it in `budget_s` (apart when a side rejects
    it: a context shorter than it), else one by one until the next would not fit, the first
    always. `deadline(chars)` is each request's deadline."""
    rates = [c.seconds_per_char for c in checks.values() if c.seconds_per_char is not None]
    rate = max(rates, default=0.0)
    apart, began = "", time.perf_counter()
    if texts is None:
        text_id, text = long_text()
        if rate * len(text) <= budget_s:
            b, c = await _both(pair, checks, text, f"perplexity:{text_id}", deadline(len(text)))
            rejected = _too_long(b) or _too_long(c)  # a context shorter than the text
            if not rejected and not (apart := _tokenized_differently(b, c)):
                return Scored((TextScore(text_id, b, c),))
        texts = reference_texts()
    spent = time.perf_counter() - began  # on a joined text that could not be compared
    scored = await _text_by_text(pair, deadline, checks, texts, budget_s, rate, spent)
    return replace(scored, note="; ".join(n for n in (apart, scored.note) if n))


def _tokens(result: Completion) -> list[str] | None:
    """The prompt's tokens as a side echoed them (the first, never scored, left out)."""
    if not result.ok or not result.prompt_logprobs:
        return None
    return [r.token for i, r in enumerate(result.prompt_logprobs) if r is not None and i > 0]


def same_tokens(a: Sequence[str], b: Sequence[str]) -> bool:
    """The two sides split the text into the same tokens, however each engine writes a token
    that holds part of a UTF-8 character (`_same_token`)."""
    return len(a) == len(b) and all(_same_token(x, y) for x, y in zip(a, b, strict=True))


def _same_token(x: str, y: str) -> bool:
    """Engines write a token holding part of a UTF-8 character differently: llama-cpp-python
    decodes each token alone and drops the partial bytes (""); vLLM decodes incrementally and
    writes at each token the characters it completes ("世" on the second of its two tokens),
    others write U+FFFD. One string then lies inside the other; ASCII tokens must be equal.
    Measured 2026-12-02 on the llama.cpp → vLLM migration: the Chinese and Japanese texts, the
    same 2,959 tokens on both sides, were called "tokenized differently" and left out."""
    x, y = x.replace(FFFD, ""), y.replace(FFFD, "")
    if x == y:
        return True
    if x and y and x.isascii() and y.isascii():
        return False
    return x in y or y in x


def _tokenized_differently(b: Completion, c: Completion) -> str:
    """Why the joined text cannot be compared token by token ("" when it can, or when a side
    returned no tokens at all: that is reported as unscored): the two tokenizers split it
    differently (a migration between engines), so the texts are scored one by one and those
    that split alike are compared."""
    tb, tc = _tokens(b), _tokens(c)
    if tb is None or tc is None or same_tokens(tb, tc):
        return ""
    return (
        f"the joined reference text tokenized differently ({len(tb) + 1} baseline, "
        f"{len(tc) + 1} candidate tokens): scored text by text"
    )


async def _text_by_text(
    pair: EndpointPair,
    deadline: Deadline,
    checks: Mapping[str, EchoCheck],
    texts: Sequence[tuple[str, str]],
    budget_s: float,
    rate: float,
    spent_s: float,
) -> Scored:
    """The texts one by one until the next would not fit what `spent_s` left of `budget_s`, the
    first always; `rate` (s/character) until one is measured here."""
    out: list[TextScore] = []
    started, chars = time.perf_counter(), 0
    for i, (text_id, text) in enumerate(texts):
        spent = time.perf_counter() - started
        if chars:
            rate = spent / chars  # measured on the texts scored so far, both sides at once
        if out and spent_s + spent + rate * len(text) > budget_s:
            skipped = tuple(t for t, _ in texts[i:])
            note = (
                f"{len(out)} of {len(texts)} reference texts scored: the next would not fit the "
                f"{budget_s:g} s scoring budget at the measured {rate * 1e3:.1f} ms/character "
                "(perplexity_budget_s)"
            )
            return Scored(tuple(out), skipped, note)
        b, c = await _both(pair, checks, text, f"perplexity:{text_id}", deadline(len(text)))
        out.append(TextScore(text_id, b, c))
        chars += len(text)
    return Scored(tuple(out))


def token_nlls(result: Completion, route: ScoringRoute) -> list[tuple[str, float | None]] | None:
    """(token, NLL) of every echoed prompt token after the first, read through `route`; the NLL
    is None where the route has no exact score (outside the shifted top-k, or no logprob)."""
    if not route.usable or not result.ok or not result.prompt_logprobs:
        return None
    raw = result.prompt_logprobs
    entries, bounded = realign(raw, route.shift)
    return [
        (r.token, None if e is None or i in bounded else -e.logprob)
        for i, (r, e) in enumerate(zip(raw, entries, strict=True))
        if r is not None and i > 0
    ]


@dataclass(frozen=True)
class ShiftResult:
    """The paired NLL shift over the texts both sides tokenized identically."""

    shift: PairedShift
    baseline_nll: float | None  # mean NLL per token of the baseline on those tokens
    texts_compared: tuple[str, ...]
    texts_unscored: tuple[str, ...]  # a side returned no usable prompt logprobs
    texts_tokenized_differently: tuple[str, ...]
    argmax_flip_rate: float | None = None  # positions whose top-1 token differs between sides
    mean_abs_dlogprob: float | None = None  # |Δ| of the text's own token's logprob, per token
    tokens_total: int = 0  # positions of the compared texts
    by_position: tuple[tuple[str, int, float], ...] = ()  # (bucket, tokens, mean shift nats)

    @property
    def coverage(self) -> float | None:
        """Share of the compared texts' positions scored exactly on both sides."""
        return self.shift.n / self.tokens_total if self.tokens_total else None


def _top1(entry: TokenLogprob) -> str:
    return max((*entry.top, (entry.token, entry.logprob)), key=lambda t: t[1])[0]


def _buckets(positions: Sequence[tuple[int, float]]) -> tuple[tuple[str, int, float], ...]:
    out = []
    for lo, hi in POSITION_BUCKETS:
        got = [d for p, d in positions if lo <= p < hi]
        if got:
            label = f"{lo}–{hi - 1}" if hi < 1 << 30 else f"≥ {lo}"
            out.append((label, len(got), sum(got) / len(got)))
    return tuple(out)


def perplexity_shift(
    scores: Sequence[TextScore], baseline: ScoringRoute, candidate: ScoringRoute
) -> ShiftResult:
    """Per-token NLL differences (candidate − baseline) grouped by text, each side read through
    its own route, on the positions scored exactly on both sides; with the share of positions
    whose top-1 token differs (argmax flips under teacher forcing) and the shift by position."""
    groups: list[list[float]] = []
    base: list[float] = []
    flips: list[bool] = []
    positions: list[tuple[int, float]] = []
    total = 0
    compared, unscored, differ = [], [], []
    for s in scores:
        b, c = token_nlls(s.baseline, baseline), token_nlls(s.candidate, candidate)
        if not b or not c:
            unscored.append(s.text_id)
            continue
        if not same_tokens([t for t, _ in b], [t for t, _ in c]):
            differ.append(s.text_id)
            continue
        both = [(i, x, y) for i, ((_, x), (_, y)) in enumerate(zip(b, c, strict=True), start=1)]
        exact = [(i, x, y) for i, x, y in both if x is not None and y is not None]
        total += len(both)
        groups.append([y - x for _, x, y in exact])
        base += [x for _, x, _ in exact]
        positions += [(i, y - x) for i, x, y in exact]
        compared.append(s.text_id)
        tops = (_tops(s.baseline, baseline), _tops(s.candidate, candidate))
        # Engines write a partial-UTF-8 token differently ("" on one, the completed character on
        # the other): two such top-1 strings are not counted as a flip (`_same_token`).
        flips += [
            not _same_token(_top1(x), _top1(y)) for x, y in zip(*tops, strict=True) if x and y
        ]
    diffs = [abs(d) for g in groups for d in g]
    return ShiftResult(
        PairedShift.from_groups([g for g in groups if g]),
        sum(base) / len(base) if base else None,
        tuple(compared),
        tuple(unscored),
        tuple(differ),
        sum(flips) / len(flips) if flips else None,
        sum(diffs) / len(diffs) if diffs else None,
        total,
        _buckets(positions),
    )


def _tops(result: Completion, route: ScoringRoute) -> list[TokenLogprob | None]:
    entries, _ = realign(result.prompt_logprobs or (), route.shift)
    return [e if e is not None and e.top else None for e in entries]


@dataclass(frozen=True, slots=True)
class CrossScore:
    """Mean NLL per token (nats) of each side's greedy text, scored by each side.

    A value in `lower_bounds` (by field name) is only a lower bound: some of its tokens were
    outside the scoring side's shifted top-k (see echo_route.realign).
    """

    baseline_on_baseline: float | None  # the baseline scoring its own text
    baseline_on_candidate: float | None  # the baseline scoring the candidate's text
    candidate_on_candidate: float | None
    candidate_on_baseline: float | None  # the candidate scoring the baseline's text
    lower_bounds: frozenset[str] = frozenset()

    @property
    def excess_nats(self) -> float | None:
        """How much less likely the baseline finds the candidate's text than its own (a lower
        bound when `excess_is_bound`)."""
        b, c = self.baseline_on_baseline, self.baseline_on_candidate
        if b is None or c is None or "baseline_on_baseline" in self.lower_bounds:
            return None
        return c - b

    @property
    def excess_is_bound(self) -> bool:
        return "baseline_on_candidate" in self.lower_bounds

    @property
    def teacher_forced_dnll_nats(self) -> float | None:
        """How much worse the candidate predicts the baseline's text than the baseline does."""
        b, c = self.baseline_on_baseline, self.candidate_on_baseline
        if (
            b is None
            or c is None
            or self.lower_bounds & {"baseline_on_baseline", "candidate_on_baseline"}
        ):
            return None
        return c - b


def tail_nll(
    entries: Sequence[TokenLogprob | None] | None,
    text: str,
    bounded: frozenset[int] = frozenset(),
) -> tuple[float | None, bool]:
    """Mean NLL per token of the echoed tokens that spell the final `text`, and whether it is
    only a lower bound (a token at a position in `bounded`); None if unknown."""
    if not entries or not text:
        return None, False
    covered, values, is_bound = 0, [], False
    for i in range(len(entries) - 1, -1, -1):
        entry = entries[i]
        if covered >= len(text):
            break
        if entry is None or not math.isfinite(entry.logprob):
            return None, False
        values.append(-entry.logprob)
        is_bound = is_bound or i in bounded
        covered += len(entry.token)
    if covered < len(text):
        return None, False
    return sum(values) / len(values), is_bound


@dataclass(frozen=True, slots=True)
class CrossEcho:
    """The four echo requests of a cross-scoring, as answered: read in `numerics.evaluate`
    through each side's scoring route (`scores`), never before it is chosen."""

    baseline_text: str
    candidate_text: str
    baseline_on_baseline: Completion | None
    baseline_on_candidate: Completion | None
    candidate_on_candidate: Completion | None = None
    candidate_on_baseline: Completion | None = None

    def scores(self, baseline: ScoringRoute, candidate: ScoringRoute) -> CrossScore:
        """Mean NLLs per token, each read through the scoring side's route (None where that
        route is unusable: an instrument that failed its check is not read)."""
        values: dict[str, float | None] = {}
        bounds: set[str] = set()
        for name, result, text, route in (
            ("baseline_on_baseline", self.baseline_on_baseline, self.baseline_text, baseline),
            ("baseline_on_candidate", self.baseline_on_candidate, self.candidate_text, baseline),
            ("candidate_on_candidate", self.candidate_on_candidate, self.candidate_text, candidate),
            ("candidate_on_baseline", self.candidate_on_baseline, self.baseline_text, candidate),
        ):
            values[name] = None
            if route.usable and result is not None and result.ok and result.prompt_logprobs:
                entries, bounded = realign(result.prompt_logprobs, route.shift)
                values[name], is_bound = tail_nll(entries, text, bounded)
                if is_bound:
                    bounds.add(name)
        return CrossScore(**values, lower_bounds=frozenset(bounds))


async def cross_score(
    pair: EndpointPair,
    probe: str,
    prompt: str,
    b_text: str,
    c_text: str,
    deadline_s: float,
    checks: Mapping[str, EchoCheck],
    *,
    candidate_scores: bool = True,
) -> CrossEcho:
    """Both greedy texts, after the probe's prompt, echoed by both sides (by the baseline only
    when `candidate_scores` is false: a candidate without echo logprobs has nothing to say)."""

    async def by(ep: Endpoint, text: str) -> Completion:
        side = "baseline" if ep is pair.baseline else "candidate"
        body = scoring_body(checks.get(side), f"{prompt}\n{text}")
        return await _send(pair, ep, body, f"score:{probe}", deadline_s)

    async def on(ep: Endpoint, own: str, other: str) -> tuple[Completion | None, Completion | None]:
        return await by(ep, own), await by(ep, other)

    async def unscored() -> tuple[Completion | None, Completion | None]:
        return None, None

    (bb, bc), (cc, cb) = await pair.sides(
        lambda: on(pair.baseline, b_text, c_text),
        (lambda: on(pair.candidate, c_text, b_text)) if candidate_scores else unscored,
    )
    return CrossEcho(b_text, c_text, bb, bc, cc, cb)
