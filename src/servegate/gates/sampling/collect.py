"""The sampling gate's I/O: a pilot per side, then every cell's draws on both sides.

Draws are not isolated: each is the same request again, and a reused KV prefix changes the
reported distribution by far less than these tests can see (the numerics gate measures that
drift). Each side gets `plan.concurrency` draws at a time, whatever it serves: a draw is judged
against the mean report of its cell, and a batching server's distribution moves with the batch
(vLLM 0.32 on CPU: the coin prompt's 'The' at 0.148 or 0.17, more often the more in flight). The
longer answers, each judged against its own logprobs or as a pair, go as many at a time as
`sampling_answer_concurrency` says: with auto, `plan.batched_concurrency` on a side that batches
and `plan.concurrency` on one that serves one request at a time (gates/batching.py). The two
sides run at once when the pair allows it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

from servegate.config.models import GateConfig
from servegate.endpoints.errors import ErrorCategory
from servegate.endpoints.protocol import Endpoint
from servegate.endpoints.recording import part
from servegate.endpoints.types import Completion, RawResponse
from servegate.gates import batching
from servegate.gates.pair import EndpointPair
from servegate.gates.sampling.bias import candidates
from servegate.gates.sampling.first_token import reported
from servegate.gates.sampling.plan import (
    NAME,
    NEUTRALS,
    BiasTarget,
    Cell,
    CellDraws,
    Reported,
    SamplingEvidence,
    SamplingPlan,
    SideSetup,
    draw_request,
    reference_cells,
    tempered_cells,
    truncation_cells,
)
from servegate.gates.sampling.sequences import SequenceDraws, SequenceRequest, sequence_requests
from servegate.gates.tokenizer import single_token

ProgressFn = Callable[[int, int, str], None]


async def pilot(
    pair: EndpointPair, ep: Endpoint, plan: SamplingPlan, deadline_s: float
) -> SideSetup:
    """The side's neutral sampler: the first of NEUTRALS it does not refuse (HTTP 4xx)."""
    prompt = plan.prompts[0][1]
    tried: list[str] = []
    for i, neutral in enumerate(NEUTRALS):
        body = draw_request(prompt, 1.0, neutral)
        answer = await pair.send(
            ep, "chat", body, gate=NAME, probe=f"pilot:{i}", deadline_s=deadline_s, isolate=False
        )
        error = answer.error
        tried.append("answered" if error is None else f"{error.category} {error.status or ''}")
        if error is None or error.category is not ErrorCategory.REJECTED:
            logprobs = bool(answer.ok and answer.logprobs and answer.logprobs[0].top)
            return SideSetup(neutral, logprobs, tuple(tried))
    return SideSetup(NEUTRALS[-1], False, tuple(tried))


async def _concurrency(
    pair: EndpointPair, cfg: GateConfig, plan: SamplingPlan, setup: dict[str, SideSetup]
) -> dict[str, SideSetup]:
    """Each side's longer answers at once: `sampling_answer_concurrency`, or with auto the
    plan's batched concurrency on a side that batches and its one-at-a-time concurrency on one
    that does not (each side measured on its own, the baseline first; once when both are one
    server)."""
    if cfg.sampling_answer_concurrency != "auto":
        at_once = cfg.sampling_answer_concurrency
        return {n: replace(s, concurrency=at_once) for n, s in setup.items()}
    found = await batching.measure_sides(pair, gate=NAME, deadline_s=cfg.request_deadline_s)
    out = {}
    for name, side in setup.items():
        chosen = found.get(name, found["baseline"])  # one server: the baseline's measurement
        at_once = plan.batched_concurrency if chosen.batches else plan.concurrency
        out[name] = replace(side, concurrency=at_once, batching=found.get(name))
    return out


async def _draws(
    pair: EndpointPair,
    ep: Endpoint,
    cells: Sequence[Cell],
    setup: SideSetup,
    at_once: int,
    deadline_s: float,
    done: Callable[[], None],
) -> list[tuple[Completion, ...]]:
    """Every draw of `cells` on one side, at most `at_once` at a time, in order."""
    gate = asyncio.Semaphore(at_once)

    async def one(cell: Cell) -> Completion:
        async with gate:
            body = cell.request(setup.neutral)
            with part(f"first tokens ({cell.kind})"):
                return await pair.send(
                    ep, "chat", body, gate=NAME, probe=cell.probe, deadline_s=deadline_s,
                    isolate=False,
                )  # fmt: skip

    async def all_of(cell: Cell) -> tuple[Completion, ...]:
        answers = tuple(await asyncio.gather(*(one(cell) for _ in range(cell.draws))))
        done()
        return answers

    return list(await asyncio.gather(*(all_of(cell) for cell in cells)))


async def _cells(
    pair: EndpointPair,
    cells: Sequence[Cell],
    setup: dict[str, SideSetup],
    plan: SamplingPlan,
    deadline_s: float,
    done: Callable[[], None],
) -> list[CellDraws]:
    n = plan.concurrency
    b, c = await pair.sides(
        lambda: _draws(pair, pair.baseline, cells, setup["baseline"], n, deadline_s, done),
        lambda: _draws(pair, pair.candidate, cells, setup["candidate"], n, deadline_s, done),
    )
    return [
        CellDraws(cell, pair.body(cell.request(setup["baseline"].neutral)),
                  pair.body(cell.request(setup["candidate"].neutral)), bd, cd)
        for cell, bd, cd in zip(cells, b, c, strict=True)
    ]  # fmt: skip


async def _sequence(
    pair: EndpointPair, ep: Endpoint, request: SequenceRequest, at_once: int, dl: float
) -> tuple[Completion | RawResponse, ...]:
    """One sequence-level request `request.times` over on one side."""
    probe = f"{request.kind}:{request.label}"
    if request.raw:
        recorded = pair.recording(ep, gate=NAME, probe=probe)
        body = pair.body(request.body)
        return tuple([await recorded.raw("POST", "/chat/completions", body, deadline_s=dl)
                      for _ in range(request.times)])  # fmt: skip
    if request.isolate:  # one at a time, each after the isolation request
        return tuple([await pair.send(ep, "chat", request.body, gate=NAME, probe=probe,
                                      deadline_s=dl) for _ in range(request.times)])  # fmt: skip
    slots = asyncio.Semaphore(at_once)

    async def one() -> Completion:
        async with slots:
            return await pair.send(ep, "chat", request.body, gate=NAME, probe=probe,
                                   deadline_s=dl, isolate=False)  # fmt: skip

    return tuple(await asyncio.gather(*(one() for _ in range(request.times))))


async def sequences(
    pair: EndpointPair, plan: SamplingPlan, setup: Mapping[str, SideSetup], dl: float
) -> tuple[SequenceDraws, ...]:
    """The production-settings probes, seeds, n > 1 and penalties on both sides (at once when
    the pair allows it), one request after another in the plan's order, each request's
    repeats `setup.concurrency` at a time (the seeds isolated, one at a time). A request's
    repeats go together and never beside another request's: on two vLLM 0.32.0 servers,
    answers of every penalty, the control and the production probes sent 16 at a time
    together stated the repetition penalty's power at 0.35-0.70 in 6 runs of 6, each
    request's own 10 at once at 0.93-0.98, 4 at a time at 0.94-1.00 (RESULTS-time.md)."""

    def requests(name: str) -> list[SequenceRequest]:
        neutral = setup[name].neutral
        return sequence_requests(plan.seeds, plan.choices_requests, plan.penalty_draws, neutral,
                                 plan.production_repeats)  # fmt: skip

    async def side(name: str) -> list[tuple[Completion | RawResponse, ...]]:
        ep = pair.baseline if name == "baseline" else pair.candidate
        out = []
        for r in requests(name):
            with part(f"answers ({r.kind})"):
                out.append(await _sequence(pair, ep, r, setup[name].concurrency, dl))
        return out

    b, c = await pair.sides(lambda: side("baseline"), lambda: side("candidate"))
    return tuple(
        SequenceDraws(r.kind, r.label, pair.body(r.body), bd, cd)
        for r, bd, cd in zip(requests("baseline"), b, c, strict=True)
    )


async def bias_target(
    pair: EndpointPair, plan: SamplingPlan, reports: Mapping[str, Reported], dl: float
) -> tuple[BiasTarget | None, str]:
    """The logit_bias cells' tokens: the most concentrated prompt's top token to ban and its
    least likely reported token to force, each one token with one id on both sides' own
    tokenizers; (None, why) when no prompt gives such a pair."""
    if not plan.bias_draws:
        return None, "logit_bias was not asked (plan.bias_draws is 0)"
    sides = (("baseline", pair.baseline), ("candidate", pair.candidate))
    probes = {s: pair.recording(ep, gate=NAME, probe="logit_bias:tokenize") for s, ep in sides}

    async def one_id(token: str) -> tuple[int | None, str]:
        ids = {}
        for side, probe in probes.items():
            found, why = await single_token(probe, pair.model, token, dl)
            if found is None:
                return None, f"{side}: {why}"
            ids[side] = found
        if ids["baseline"] != ids["candidate"]:
            return None, f"the sides' tokenizers give {token!r} different ids ({ids})"
        return ids["baseline"], ""

    why = "no baseline temperature-1 report names a token to ban and one to force"
    for pid, text, (banned, banned_p), rare in candidates(plan.prompts, reports):
        banned_id, why = await one_id(banned)
        if banned_id is None:
            if "tokenizer endpoint" in why:
                return None, why  # no route on this server: another prompt will not help
            continue
        for forced, forced_p in rare[:3]:
            forced_id, why = await one_id(forced)
            if forced_id is not None and forced_id != banned_id:
                return BiasTarget(pid, text, banned, banned_id, banned_p, forced, forced_id,
                                  forced_p), ""  # fmt: skip
    return None, why


async def collect(
    pair: EndpointPair,
    cfg: GateConfig,
    *,
    plan: SamplingPlan | None = None,
    progress: ProgressFn | None = None,
) -> SamplingEvidence:
    """The pilots, the temperature-1 cells, then the tempered and truncation cells (whose
    values come from the baseline's temperature-1 report)."""
    plan = plan or SamplingPlan()
    started = time.perf_counter()
    dl = cfg.request_deadline_s
    with part("pilot"):
        b_setup, c_setup = await pair.sides(
            lambda: pilot(pair, pair.baseline, plan, dl),
            lambda: pilot(pair, pair.candidate, plan, dl),
        )
    with part("batching"):
        setup = await _concurrency(pair, cfg, plan, {"baseline": b_setup, "candidate": c_setup})
    first = reference_cells(plan)
    total = 2 * (len(first) + len(plan.temperatures) * len(plan.prompts)
                 + len(plan.truncations) * plan.truncation_prompts
                 + (2 if plan.bias_draws else 0))  # fmt: skip
    finished = 0

    def done() -> None:
        nonlocal finished
        finished += 1
        if progress is not None:
            progress(min(finished, total - 1), total, "draws")

    refs = await _cells(pair, first, setup, plan, dl, done)
    baseline: dict[str, Reported] = {}
    for cd in refs:  # planning the next cells, not judging: the truncation values come from here
        report = reported([c for c in cd.baseline if c.ok])
        if report is not None:
            baseline[cd.cell.prompt_id] = report
    truncations = truncation_cells(plan, baseline)
    planned = {str(c.kind) for c in truncations}
    unplanned = tuple(
        (str(kind), "no prompt's temperature-1 report on the baseline gives a kept set clear of "
                    "the margins" if baseline else "the baseline gave no temperature-1 report")
        for kind in plan.truncations if str(kind) not in planned
    )  # fmt: skip
    with part("logit_bias tokens"):
        target, bias_unplanned = await bias_target(pair, plan, baseline, dl)
    biased = target.cells(plan.bias_draws) if target is not None else []
    rest = await _cells(pair, [*tempered_cells(plan), *truncations, *biased], setup, plan, dl, done)
    first_tokens = time.perf_counter() - started  # the pilots and every first-token draw
    longer = await sequences(pair, plan, setup, dl)
    if progress is not None:
        progress(total, total, "")
    return SamplingEvidence(
        cells=(*refs, *rest),
        setup=setup,
        baseline_url=pair.baseline.base_url,
        candidate_url=pair.candidate.base_url,
        model=pair.model,
        plan=plan,
        seconds=time.perf_counter() - started,
        first_token_seconds=first_tokens,
        unplanned=unplanned,
        sequences=longer,
        bias=target,
        bias_unplanned=bias_unplanned,
    )
