"""A simulated sampling server for the sampling gate's tests on plain data: a known first-token
distribution, sampled as a correct server samples it, or with one of the bugs the gate is for."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from servegate.endpoints.errors import ErrorCategory, RequestError
from servegate.endpoints.types import Completion, RawResponse, TokenLogprob
from servegate.gates.sampling.bias import candidates
from servegate.gates.sampling.first_token import reported
from servegate.gates.sampling.plan import (
    NEUTRALS,
    BiasTarget,
    Cell,
    CellDraws,
    Reported,
    SamplingEvidence,
    SamplingPlan,
    SideSetup,
    reference_cells,
    tempered_cells,
    truncation_cells,
)
from servegate.gates.sampling.sequences import SequenceDraws, SequenceRequest, sequence_requests

HEAD = ("The", "A", "One", "1", "I", "In", "This", "Piano", "Guitar", "Violin")
HEAD_P = (0.42, 0.15, 0.05, 0.03, 0.03, 0.025, 0.02, 0.02, 0.015, 0.012)


def distribution(seed: int = 0) -> dict[str, float]:
    """The head above and 300 tail tokens sharing the rest, none above the head's last."""
    rest = 1 - sum(HEAD_P)
    tail = np.random.default_rng(seed).dirichlet(np.ones(300)) * rest
    tail = np.minimum(tail, HEAD_P[-1] * 0.9)
    tail *= rest / tail.sum()
    return {
        **dict(zip(HEAD, HEAD_P, strict=True)),
        **{f"t{i}": float(p) for i, p in enumerate(tail)},
    }


@dataclass
class Server:
    """How one simulated side samples."""

    probs: Mapping[str, float] = field(default_factory=distribution)
    greedy: bool = False
    temperature: float | None = None  # replaces every sampled temperature
    ignore: tuple[str, ...] = ()  # truncation parameters it ignores
    narrow_top_p: float = 1.0  # multiplies top_p below 1
    processed: bool = False  # logprobs after temperature
    append_sampled: bool = True  # the sampled token added to the top 20 (llama.cpp's chat)
    logprobs: bool = True
    refuse: tuple[str, ...] = ()  # parameters answered with HTTP 400
    seed: int = 0
    seeds: bool = True  # the same seed reproduces (llama-cpp-python's do not)
    # n > 1: "offered", "one" (n ignored), "collapsed" (copies), "refused" (HTTP 400, as vLLM
    # answers n > 1 at temperature 0)
    choices: str = "offered"
    penalties: bool = True  # penalties lower repetition
    bias: bool = True  # logit_bias honoured (token ids: positions in `probs`)
    garbage: bool = False  # sampled answers longer than a token are vLLM 0.25's "!!!!…"

    def __post_init__(self) -> None:
        self.rng = np.random.default_rng(self.seed)
        self.tokens = list(self.probs)
        self.p = np.array([self.probs[t] for t in self.tokens])

    def _kept(self, params: Mapping[str, Any]) -> np.ndarray:
        order = np.argsort(-self.p)
        keep = np.ones(len(self.p), dtype=bool)
        top_k = params.get("top_k")
        if isinstance(top_k, int) and top_k > 0 and "top_k" not in self.ignore:
            keep[order[top_k:]] = False
        top_p = params.get("top_p")
        if isinstance(top_p, float) and top_p < 1 and "top_p" not in self.ignore:
            top_p *= self.narrow_top_p
            cumulative = np.cumsum(self.p[order])
            cut = int(np.searchsorted(cumulative, top_p)) + 1
            keep[order[cut:]] = False
        min_p = params.get("min_p")
        if isinstance(min_p, float) and min_p > 0 and "min_p" not in self.ignore:
            keep &= self.p >= min_p * self.p.max()
        return keep

    def _top(self, logp: np.ndarray, sampled: int) -> tuple[tuple[str, float], ...]:
        order = list(np.argsort(-logp)[:20])
        if self.append_sampled and sampled not in order:
            order.append(sampled)
        return tuple((self.tokens[i], float(logp[i])) for i in order)

    def draw(self, body: Mapping[str, Any]) -> Completion:
        refused = [k for k in self.refuse if k in body]
        if refused:
            error = RequestError(
                ErrorCategory.REJECTED,
                f"unknown parameter {refused[0]}",
                400,
                body_excerpt=f'{{"error": "{refused[0]} is not supported"}}',
            )
            return Completion(status=400, error=error)
        t = 0.0 if self.greedy else self.temperature or float(body["temperature"])
        keep = self._kept(body)
        biased = self.p.copy()
        for token_id, bias in (body.get("logit_bias") or {}).items() if self.bias else ():
            biased[int(token_id)] *= math.exp(bias)
        base = biased / biased.sum()
        if t == 0:
            sampled = int(np.argmax(np.where(keep, base, -1)))
            shown = np.log(self.p)
        else:
            w = np.where(keep, base ** (1 / t), 0.0)
            w /= w.sum()
            sampled = int(self.rng.choice(len(w), p=w))
            with np.errstate(divide="ignore"):
                shown = np.log(w) if self.processed else np.log(self.p)
        token = self.tokens[sampled]
        logprobs = (TokenLogprob(token, float(shown[sampled]), self._top(shown, sampled)),)
        return Completion(status=200, content=token, logprobs=logprobs if self.logprobs else None)


def neutral_of(server: Server) -> Mapping[str, Any]:
    """What the gate's pilot finds: the first neutral sampler the server does not refuse."""
    return next((n for n in NEUTRALS if not any(k in n for k in server.refuse)), NEUTRALS[-1])


def _words(rng: np.random.Generator, repeated: float, n: int = 24) -> str:
    """n words, about `repeated` of them repeats of an earlier one."""
    words = [f"w{rng.integers(1_000_000)}"]
    for _ in range(n - 1):
        words.append(words[int(rng.integers(len(words)))] if rng.random() < repeated
                     else f"w{rng.integers(1_000_000)}")  # fmt: skip
    return " ".join(words)


def _raw(payload: dict[str, Any] | list[dict[str, Any]]) -> RawResponse:
    if isinstance(payload, list):  # a stream
        body = "".join(f"data: {json.dumps(p)}\n\n" for p in payload) + "data: [DONE]\n\n"
        return RawResponse(200, {"content-type": "text/event-stream"}, body.encode())
    return RawResponse(200, {"content-type": "application/json"}, json.dumps(payload).encode())


def sequence(server: Server, request: SequenceRequest) -> Completion | RawResponse:
    """A simulated answer to a seed, n > 1 or penalty request."""
    body = request.body
    if request.kind == "seed":
        seeded = server.seeds and "seed" in body
        rng = np.random.default_rng(int(body["seed"])) if seeded else server.rng
        return Completion(status=200, content=_words(rng, 0.1, 12))
    if request.kind == "production":
        return _production(server, request.label)
    if request.kind == "choices":
        if server.choices == "refused":
            error = {"error": {"message": "n must be 1 when using greedy sampling, got 4."}}
            return RawResponse(400, {"content-type": "application/json"},
                               json.dumps(error).encode())  # fmt: skip
        n = 1 if server.choices == "one" else int(body.get("n", 1))
        texts = [f"{server.rng.choice(['Paris', 'Rome', 'Oslo', 'Bern'])} {i}" for i in range(n)]
        if server.choices == "collapsed":
            texts = [texts[0]] * n
        if body.get("stream"):
            return _raw([{"choices": [{"index": i, "delta": {"content": t}}]}
                         for i, t in enumerate(texts)])  # fmt: skip
        return _raw({"choices": [{"index": i, "message": {"content": t}}
                                 for i, t in enumerate(texts)]})  # fmt: skip
    penalised = server.penalties and (
        body.get("presence_penalty", 0) > 0
        or body.get("frequency_penalty", 0) > 0
        or body.get("repetition_penalty", 1) > 1
    )
    return _penalty_answer(server.rng, 4.0 if penalised else 1.0)


# Right answers to the production-settings probes, phrased several ways (the first: greedy's).
_PHRASINGS = {
    "sum": ("42", "The answer is 42.", "17 + 25 = 42", "It is 42."),
    "json": (
        '{"city": "Paris"}',
        '{"city": "Lyon"}',
        'Sure: {"city": "Nice"}',
        '{"city": "Lille"}',
    ),
    "ok": ("OK", "OK.", "ok", "OK!"),
    "story": tuple(
        f"{w} cat story."
        for w in ("One", "A", "The", "Tom", "Kit", "Old", "My", "Fat", "Sly", "Red", "Shy", "Wet")
    ),
}


def _production(server: Server, label: str) -> Completion:
    if server.garbage:
        return Completion(status=200, content="!" * 32, finish_reason="length")
    options = _PHRASINGS[label]
    text = options[0] if server.greedy else options[int(server.rng.integers(len(options)))]
    return Completion(status=200, content=text, finish_reason="stop")


_VOCAB = [f"w{i}" for i in range(40)]
_RAW = np.array([1.0 / (i + 1) for i in range(40)]) / sum(1.0 / (i + 1) for i in range(40))


def _penalty_answer(rng: np.random.Generator, penalty: float, tokens: int = 32) -> Completion:
    """32 tokens sampled from a fixed raw distribution, each token already drawn `penalty`
    times less likely; the logprobs report the raw distribution."""
    seen: set[int] = set()
    entries = []
    top = tuple((_VOCAB[i], math.log(_RAW[i])) for i in range(20))
    for _ in range(tokens):
        w = _RAW.copy()
        for i in seen:
            w[i] /= penalty
        w /= w.sum()
        i = int(rng.choice(len(w), p=w))
        entries.append(TokenLogprob(_VOCAB[i], math.log(_RAW[i]), top))
        seen.add(i)
    return Completion(status=200, content=" ".join(e.token for e in entries),
                      logprobs=tuple(entries))  # fmt: skip


def _side(server: Server, cells: Sequence[Cell]) -> list[tuple[Completion, ...]]:
    neutral = neutral_of(server)
    return [tuple(server.draw(cell.request(neutral)) for _ in range(cell.draws)) for cell in cells]


def bias_target(
    baseline: Server, candidate: Server, plan: SamplingPlan, reports: Mapping[str, Reported]
) -> tuple[BiasTarget | None, str]:
    """What collect's bias_target finds, the tokenizer being each server's token list."""
    if not plan.bias_draws:
        return None, "logit_bias was not asked (plan.bias_draws is 0)"
    for pid, text, (banned, banned_p), rare in candidates(plan.prompts, reports):
        ids = {s.tokens.index(banned) for s in (baseline, candidate)}
        forced, forced_p = rare[0]
        forced_ids = {s.tokens.index(forced) for s in (baseline, candidate)}
        if len(ids) == 1 and len(forced_ids) == 1:
            return BiasTarget(pid, text, banned, ids.pop(), banned_p, forced, forced_ids.pop(),
                              forced_p), ""  # fmt: skip
    return None, "the sides' tokenizers give different ids"


def evidence(
    baseline: Server, candidate: Server, plan: SamplingPlan | None = None
) -> SamplingEvidence:
    """The gate's evidence as collect would gather it from two simulated servers."""
    plan = plan or SamplingPlan()
    first = reference_cells(plan)
    b_refs, c_refs = _side(baseline, first), _side(candidate, first)
    reports: dict[str, Reported] = {}
    for cell, draws in zip(first, b_refs, strict=True):
        report = reported([d for d in draws if d.ok])
        if report is not None:
            reports[cell.prompt_id] = report
    target, unplanned = bias_target(baseline, candidate, plan, reports)
    biased = target.cells(plan.bias_draws) if target is not None else []
    rest = [*tempered_cells(plan), *truncation_cells(plan, reports)]
    cells = [*first, *rest, *biased]
    b_draws = [*b_refs, *_side(baseline, rest)]
    c_draws = [*c_refs, *_side(candidate, rest)]
    plan_ = plan
    longer = tuple(
        SequenceDraws(r.kind, r.label, r.body,
                      tuple(sequence(baseline, r) for _ in range(r.times)),
                      tuple(sequence(candidate, r) for _ in range(r.times)))
        for r in sequence_requests(plan_.seeds, plan_.choices_requests, plan_.penalty_draws,
                                   neutral_of(baseline), plan_.production_repeats)
    )  # fmt: skip
    # drawn last, so that the other cells' and answers' random streams do not depend on them
    b_draws += _side(baseline, biased)
    c_draws += _side(candidate, biased)
    return SamplingEvidence(
        sequences=longer,
        cells=tuple(
            CellDraws(
                cell, cell.request(neutral_of(baseline)), cell.request(neutral_of(candidate)), b, c
            )
            for cell, b, c in zip(cells, b_draws, c_draws, strict=True)
        ),
        setup={
            "baseline": SideSetup(neutral_of(baseline), baseline.logprobs),
            "candidate": SideSetup(neutral_of(candidate), candidate.logprobs),
        },
        baseline_url="http://127.0.0.1:1/v1",
        candidate_url="http://127.0.0.1:2/v1",
        model="m",
        plan=plan,
        bias=target,
        bias_unplanned=unplanned,
    )


def logprob(p: float) -> float:
    return math.log(p)
