"""Gate 4, context & tools: long prompts, the prefix cache and the streaming paths agree.

Each probe is judged per side, then relative to the baseline: baseline passes and candidate fails
= regressed (blocks); baseline fails = baseline-fail (reported as info); unmeasurable on either
side = inconclusive (stated). Probes:
- needles (RULER style) at start/middle/end × lengths: the answer holds the needle's number;
- prefix cache: one long prompt twice, the second without isolation; the hit is proven by
  `cached_tokens` or a TTFT drop, and must answer like the miss;
- stream parity: text and a forced tool call, streamed and not; streamed tool-call deltas joined
  per index equal the non-streamed calls, and arguments are JSON objects;
- cancellation: a stream cut after `cancel_after_s`, then a request that must answer as before;
- reasoning: content never repeats `reasoning` or carries `<think>` tags (checked on every answer).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import replace

from servegate.config.models import GateConfig
from servegate.endpoints.protocol import Endpoint
from servegate.endpoints.recording import part
from servegate.endpoints.types import Completion
from servegate.gates.context.judgement import evaluate, judge
from servegate.gates.context.plan import (
    LONG_STREAM_REQUEST,
    NAME,
    ContextEvidence,
    ContextPlan,
    Kind,
    ProgressFn,
    Step,
    StepObservation,
    full_grid,
    long_needle,
    steps,
)
from servegate.gates.pair import EndpointPair, timed_out
from servegate.gates.sizing import discover_context

__all__ = [
    "LONG_STREAM_REQUEST",
    "NAME",
    "ContextEvidence",
    "ContextPlan",
    "Kind",
    "StepObservation",
    "collect",
    "evaluate",
    "full_grid",
    "judge",
    "steps",
]


# What each step's requests are for, in the gate's time (GateTime.parts).
PARTS = {
    Kind.NEEDLE: "long-context needles",
    Kind.PREFIX_CACHE: "prefix cache",
    Kind.STREAM_TEXT: "stream parity (text)",
    Kind.STREAM_TOOLS: "stream parity (tool calls)",
    Kind.CANCEL: "cancellation",
    Kind.REASONING: "reasoning",
}


async def _send(
    pair: EndpointPair, ep: Endpoint, step: Step, i: int, deadline_s: float, isolate: bool = True
) -> Completion:
    request, probe = step.requests[i], step.probe
    if isolate:
        return await pair.send(ep, "chat", request, gate=NAME, probe=probe, deadline_s=deadline_s)
    body = pair.body(request)  # the prefix-cache hit: nothing may run between miss and hit
    result = await ep.chat(body, deadline_s=deadline_s)
    pair.recorder.record(gate=NAME, probe=probe, side=ep.name, api="chat", request=body,
                         result=result)  # fmt: skip
    return result


async def _run_side(
    pair: EndpointPair, ep: Endpoint, step: Step, deadline_s: float, plan: ContextPlan
) -> tuple[Completion, ...]:
    if step.kind is Kind.PREFIX_CACHE:
        miss = await _send(pair, ep, step, 0, deadline_s)
        return miss, await _send(pair, ep, step, 0, deadline_s, isolate=False)
    if step.kind is Kind.CANCEL:
        # The cut is the request deadline: the client closes the connection mid-stream. The
        # reference's latency (a prompt as short) stands for the time to the first token.
        ref = await _send(pair, ep, step, 0, deadline_s)
        delay_s = _spent_s([ref]) + plan.cancel_after_s
        cut = await _send(pair, ep, step, 1, delay_s)
        if cut.error is not None and not cut.timing.token_chunk_ns:  # cut before the first token
            cut = await _send(pair, ep, step, 1, 3 * delay_s)  # on a busy host: once, later
        return ref, cut, await _send(pair, ep, step, 0, deadline_s)
    return tuple([await _send(pair, ep, step, i, deadline_s) for i in range(len(step.requests))])


def _hung(step: Step, runs: Sequence[Completion]) -> bool:
    """A run timed out, other than the cancel probe's deliberate cut."""
    return any(
        timed_out(r) for i, r in enumerate(runs) if not (step.kind is Kind.CANCEL and i == 1)
    )


def _spent_s(runs: Sequence[Completion]) -> float:
    return sum(((r.timing.done_ns or r.timing.sent_ns) - r.timing.sent_ns) / 1e9 for r in runs)


def _prompt_chars(step: Step) -> int:
    return sum(len(str(m.get("content") or "")) for m in step.requests[0].get("messages", ()))


def _pace(pace: float | None, step: Step, b: Sequence[Completion]) -> float | None:
    """The baseline's slowest seconds per prompt character on a long prompt so far: `pace`
    updated with this step's first (isolated, uncached) answer when it is a needle's."""
    chars = _prompt_chars(step)
    if step.needle is None or not b or not b[0].ok or b[0].timing.done_ns is None or not chars:
        return pace
    seen = _spent_s(b[:1]) / chars
    return seen if pace is None else max(pace, seen)


def _paced_s(cfg: GateConfig, pace: float | None, step: Step) -> float:
    """`timeout_latency_factor` × the baseline's pace on the earlier needles × this needle's
    prompt: what a side may take on a long prompt before it is known how long the baseline
    took; 0 before the first needle's answer, and for a step that is no needle."""
    if pace is None or step.needle is None:
        return 0.0
    return cfg.policy.timeout_latency_factor * pace * _prompt_chars(step)


def baseline_deadline_s(cfg: GateConfig, pace: float | None, step: Step) -> float:
    """The baseline's deadline for `step`: the request deadline, or for a needle
    `timeout_latency_factor` × the baseline's own pace on the shorter needles × its prompt, when
    that is longer. A slow host then answers a long needle late instead of not at all (on a
    loaded 2-core host the 2,500-token needle took over 60 s); a baseline that hangs still
    times out, after a multiple of its own measured time."""
    return max(cfg.request_deadline_s, _paced_s(cfg, pace, step))


def candidate_floor_s(cfg: GateConfig, pace: float | None, step: Step) -> float:
    """The candidate's deadline while the baseline is still answering the same step beside it:
    the probe deadline, or for a needle the same pace-scaled time as the baseline's, when that
    is longer. Cut at the probe deadline alone, every long needle (a 2,500-token prompt takes
    20-30 s on a 2-core host) timed out once and was sent again, and llama-cpp-python went on
    processing the abandoned prompt beside the baseline's."""
    return max(cfg.probe_deadline_s, _paced_s(cfg, pace, step))


async def _both_sides(
    pair: EndpointPair,
    step: Step,
    cfg: GateConfig,
    plan: ContextPlan,
    send_candidate: bool,
    *,
    baseline_deadline: float,
    candidate_floor: float,
) -> tuple[tuple[Completion, ...], tuple[Completion, ...]]:
    """One step on the baseline (within `baseline_deadline`) and (unless `send_candidate` is
    False: it would only hang again) on the candidate, at the same time when the pair allows it.

    Time is not content: the candidate gets a multiple of the baseline's own time for the same
    work (floored by the probe deadline) and one retry before it is hung. Started beside the
    baseline, it runs with `candidate_floor` first (`candidate_floor_s`); only when that hangs
    is the baseline's time awaited, and a floor that cut it short is run again with the scaled
    slack. A floor longer than the scaled slack (the baseline answered faster than its
    pace foretold) counts as the first attempt, and the retry gets the scaled slack."""
    done: asyncio.Future[tuple[Completion, ...]] = asyncio.get_running_loop().create_future()

    async def baseline() -> tuple[Completion, ...]:
        b = await _run_side(pair, pair.baseline, step, baseline_deadline, plan)
        done.set_result(b)
        return b

    def slack_of(b: Sequence[Completion]) -> float:
        return max(cfg.probe_deadline_s, cfg.policy.timeout_latency_factor * _spent_s(b))

    async def candidate() -> tuple[Completion, ...]:
        if not send_candidate:
            return ()
        attempts, slack = 2, slack_of(done.result()) if done.done() else candidate_floor
        if not done.done():
            c = await _run_side(pair, pair.candidate, step, slack, plan)
            if not _hung(step, c):
                return c
            scaled = slack_of(await done)
            attempts, slack = (2 if scaled > slack else 1), scaled
        for _ in range(attempts):
            c = await _run_side(pair, pair.candidate, step, slack, plan)
            if not _hung(step, c):
                break
        return c

    return await pair.sides(baseline, candidate)


async def collect(
    pair: EndpointPair,
    cfg: GateConfig,
    *,
    plan: ContextPlan | None = None,
    progress: ProgressFn | None = None,
) -> ContextEvidence:
    """Send every probe to baseline and candidate (at the same time when the pair allows it),
    each request isolated unless stated."""
    contexts: dict[str, int | None] | None = None
    extra: int | None = None
    if plan is None:  # the default plan grows a needle to 80 % of the discovered context
        plan = ContextPlan()
        with part("context discovery"):
            contexts = {
                side: (await discover_context(pair, ep, cfg.probe_deadline_s, NAME))[0]
                for side, ep in (("baseline", pair.baseline), ("candidate", pair.candidate))
            }
        extra = long_needle(contexts, plan)
        if extra is not None:
            plan = replace(plan, needles=(*plan.needles, (extra, "middle")))
    todo = steps(plan)
    observations: list[StepObservation] = []
    hung_at: int | None = None  # the shortest prompt (tokens) the candidate timed out on
    pace: float | None = None  # the baseline's seconds per prompt character (`_pace`)
    for i, step in enumerate(todo):
        if progress is not None:
            progress(i, len(todo), step.probe)
        length = step.needle.target_tokens if step.needle is not None else None
        send_candidate = length is None or hung_at is None or length < hung_at
        with part(PARTS[step.kind]):
            b, c = await _both_sides(
                pair, step, cfg, plan, send_candidate,
                baseline_deadline=baseline_deadline_s(cfg, pace, step),
                candidate_floor=candidate_floor_s(cfg, pace, step),
            )  # fmt: skip
        pace = _pace(pace, step, b)
        if length is not None and _hung(step, c):  # never when not sent: c is ()
            hung_at = min(hung_at or length, length)
        request = pair.body(step.requests[-1])
        if step.kind is Kind.PREFIX_CACHE and plan.cache_needle in plan.needles:
            assert step.needle is not None  # the cache miss is also this needle's answer
            observations.append(
                StepObservation(step.needle.id, Kind.NEEDLE, request, b[:1], c[:1], step.needle)
            )
        observations.append(StepObservation(step.probe, step.kind, request, b, c, step.needle))
    if progress is not None:
        progress(len(todo), len(todo), "")
    return ContextEvidence(
        tuple(observations),
        pair.baseline.base_url,
        pair.candidate.base_url,
        pair.model,
        plan,
        contexts,
        extra,
    )
