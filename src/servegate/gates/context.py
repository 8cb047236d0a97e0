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

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from servegate.config.models import GateConfig, Policy
from servegate.endpoints.errors import ErrorCategory
from servegate.endpoints.protocol import Endpoint
from servegate.endpoints.types import Completion
from servegate.gates.capabilities import WEATHER_TOOL
from servegate.gates.evidence import curl, describe
from servegate.gates.golden import ProbeStatus
from servegate.gates.pair import EndpointPair
from servegate.probes.needles import POSITIONS, Needle, Position, make_needle, needle_grid
from servegate.verdict.model import Finding, GateResult, MetricValue, Severity, Status

NAME = "context"

ProgressFn = Callable[[int, int, str], None]


class Kind(StrEnum):
    NEEDLE = "needle"
    PREFIX_CACHE = "prefix_cache"
    STREAM_TEXT = "stream_text"
    STREAM_TOOLS = "stream_tools"
    CANCEL = "cancel"
    REASONING = "reasoning"


CATEGORY = {
    Kind.NEEDLE: "long_context",
    Kind.PREFIX_CACHE: "prefix_cache",
    Kind.STREAM_TEXT: "stream_parity",
    Kind.STREAM_TOOLS: "stream_parity",
    Kind.CANCEL: "cancellation",
    Kind.REASONING: "reasoning_leak",
}
# What each side's runs of a probe are, in order.
RUN_LABELS = {
    Kind.NEEDLE: ("answer",),
    Kind.PREFIX_CACHE: ("miss", "hit"),
    Kind.STREAM_TEXT: ("plain", "stream"),
    Kind.STREAM_TOOLS: ("plain", "stream"),
    Kind.CANCEL: ("reference", "cut", "after-cancel"),
    Kind.REASONING: ("answer",),
}


def _chat(text: str, max_tokens: int, **extra: Any) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": text}], "max_tokens": max_tokens,
            "temperature": 0, **extra}  # fmt: skip


_FORCE = {"type": "function", "function": {"name": "get_weather"}}
_STREAM = {"stream": True, "stream_options": {"include_usage": True}}
TEXT_REQUEST = _chat("Write two short sentences about the sea.", 40)
TOOL_REQUEST = _chat("What is the weather in Paris?", 48, tools=[WEATHER_TOOL],
                     tool_choice=_FORCE)  # fmt: skip
# Long on every model tried: SmolLM2-135M writes a story past 300 tokens, but cuts counting short.
LONG_STREAM_REQUEST = _chat("Write a long story about a dragon who learns to bake bread.", 600,
                            stream=True)  # fmt: skip
AFTER_CANCEL_REQUEST = _chat("Name the capital of France in one word.", 12)
REASONING_REQUEST = _chat("Is 91 a prime number? Think step by step.", 48)
_HUNG = (ErrorCategory.TIMEOUT, ErrorCategory.STALLED)
_THINK_TAG = re.compile(r"</?\s*(think|thinking|reasoning|thought)\s*>", re.IGNORECASE)


@dataclass(frozen=True)
class ContextPlan:
    """What the gate sends; the defaults fit a 4096-token context on a small CPU model.

    Prompt processing dominates the cost (measured 15-60 tokens/s per engine on a shared 2-core
    CPU; 3000 tokens then exceed a 60 s deadline), so the default needles are a sparse grid:
    every position at 500 tokens, the middle at 1500, and the start at 2500 (~60 % of a 4096
    context), where left truncation and position bugs show first. `full_grid()` gives all nine.
    The prefix-cache probe re-sends `cache_needle`; when that is one of `needles`, its miss is
    that needle's answer, so the long prompt is processed once, not twice."""

    seed: int = 0
    needles: tuple[tuple[int, Position], ...] = (
        (500, "start"), (500, "middle"), (500, "end"), (1500, "middle"), (2500, "start"),
    )  # fmt: skip
    needle_max_tokens: int = 16
    cache_needle: tuple[int, Position] = (1500, "middle")
    cache_max_tokens: int = 48
    hit_ttft_ratio_max: float = 0.5  # a hit is proven when its TTFT is at most this × the miss's
    cancel_after_s: float = 1.5  # streaming time before the cut, after a short answer's latency
    candidate_deadline_factor: float = 4.0  # × the baseline's time, floored by the probe deadline


@dataclass(frozen=True)
class Step:
    """A probe to send; its requests in the order its kind uses them (see `_run_side`)."""

    probe: str
    kind: Kind
    requests: tuple[Mapping[str, Any], ...]
    needle: Needle | None = None


@dataclass(frozen=True)
class Observation:
    """One probe: its main request as sent, and each side's runs (RUN_LABELS order).
    An empty candidate tuple means not sent (the candidate hung on a shorter prompt)."""

    probe: str
    kind: Kind
    request: Mapping[str, Any]
    baseline: tuple[Completion, ...]
    candidate: tuple[Completion, ...]
    needle: Needle | None = None


@dataclass(frozen=True)
class ContextEvidence:
    observations: tuple[Observation, ...]
    baseline_url: str
    candidate_url: str
    model: str | None
    plan: ContextPlan = ContextPlan()


def full_grid(
    lengths: Sequence[int] = (500, 1500, 3000), positions: Sequence[Position] = POSITIONS
) -> tuple[tuple[int, Position], ...]:
    """Every (length, position) pair, for `ContextPlan(needles=full_grid())`."""
    return tuple((n.target_tokens, n.position) for n in needle_grid(0, lengths, positions))


def steps(plan: ContextPlan) -> tuple[Step, ...]:
    """Every probe the gate sends under `plan`, in order."""
    cache = make_needle(plan.seed, *plan.cache_needle)
    needles = [make_needle(plan.seed, *pair) for pair in plan.needles if pair != plan.cache_needle]
    # A longer answer than a bare number: KV reuse flips greedy tokens only after a few dozen.
    follow_up = f"Then describe {cache.name} in two sentences."
    cache_request = {**cache.request(plan.cache_max_tokens, follow_up), **_STREAM}
    return (
        *(Step(n.id, Kind.NEEDLE, (n.request(plan.needle_max_tokens),), n) for n in needles),
        Step("prefix-cache", Kind.PREFIX_CACHE, (cache_request,), cache),
        Step("stream-text", Kind.STREAM_TEXT, (TEXT_REQUEST, {**TEXT_REQUEST, **_STREAM})),
        Step("stream-tools", Kind.STREAM_TOOLS, (TOOL_REQUEST, {**TOOL_REQUEST, **_STREAM})),
        Step("cancel", Kind.CANCEL, (AFTER_CANCEL_REQUEST, LONG_STREAM_REQUEST)),
        Step("reasoning", Kind.REASONING, (REASONING_REQUEST,)),
    )


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


def _timed_out(r: Completion) -> bool:
    return r.error is not None and r.error.category in _HUNG


def _spent_s(runs: Sequence[Completion]) -> float:
    return sum(((r.timing.done_ns or r.timing.sent_ns) - r.timing.sent_ns) / 1e9 for r in runs)


async def collect(
    pair: EndpointPair,
    cfg: GateConfig,
    *,
    plan: ContextPlan | None = None,
    progress: ProgressFn | None = None,
) -> ContextEvidence:
    """Send every probe to baseline then candidate, each request isolated unless stated."""
    plan = plan or ContextPlan()
    todo = steps(plan)
    observations: list[Observation] = []
    hung_at: int | None = None  # the shortest prompt (tokens) the candidate timed out on
    for i, step in enumerate(todo):
        if progress is not None:
            progress(i, len(todo), step.probe)
        b = await _run_side(pair, pair.baseline, step, cfg.request_deadline_s, plan)
        length = step.needle.target_tokens if step.needle is not None else None
        c: tuple[Completion, ...] = ()  # not sent: it would only hang again
        if length is None or hung_at is None or length < hung_at:
            # A hanging candidate must not cost the full deadline on every probe: it gets a
            # multiple of the baseline's time for the same work, floored by the probe deadline.
            slack = max(cfg.probe_deadline_s, plan.candidate_deadline_factor * _spent_s(b))
            c = await _run_side(
                pair, pair.candidate, step, min(cfg.request_deadline_s, slack), plan
            )
            if length is not None and any(_timed_out(r) for r in c):
                hung_at = min(hung_at or length, length)
        request = pair.body(step.requests[-1])
        if step.kind is Kind.PREFIX_CACHE and plan.cache_needle in plan.needles:
            assert step.needle is not None  # the cache miss is also this needle's answer
            observations.append(
                Observation(step.needle.id, Kind.NEEDLE, request, b[:1], c[:1], step.needle)
            )
        observations.append(Observation(step.probe, step.kind, request, b, c, step.needle))
    if progress is not None:
        progress(len(todo), len(todo), "")
    return ContextEvidence(
        tuple(observations), pair.baseline.base_url, pair.candidate.base_url, pair.model, plan
    )


@dataclass(frozen=True)
class SideVerdict:
    """One side's result on one probe; ok is None when it could not be measured there."""

    ok: bool | None
    why: str
    category: str | None = None  # overrides the probe's category (invalid_tool_args)
    errored: bool = False
    hung: bool = False


def _json_object(raw: str) -> dict[str, Any] | None:
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _calls(c: Completion) -> tuple[tuple[str | None, object], ...]:
    ordered = sorted(c.tool_calls, key=lambda t: t.index)
    return tuple((t.name, _json_object(t.arguments) or t.arguments) for t in ordered)


def reasoning_leak(c: Completion) -> str | None:
    """Why `c`'s content carries reasoning (it repeats `reasoning`, or has think tags), or None."""
    head = (c.reasoning or "").strip()[:80]
    if len(head) >= 12 and head in c.text:
        return f"content repeats the reasoning ({head[:40]!r}…)"
    tag = _THINK_TAG.search(c.text)
    return f"content carries a {tag.group(0)!r} tag" if tag else None


def _hit_proof(miss: Completion, hit: Completion, plan: ContextPlan) -> str | None:
    cached = hit.usage.cached_tokens if hit.usage is not None else None
    if cached:
        return f"cached_tokens={cached}"
    m, h = miss.timing.ttft_ms, hit.timing.ttft_ms
    if m is not None and h is not None and h <= plan.hit_ttft_ratio_max * m and m - h >= 20:
        return f"TTFT {m:.0f} ms on the miss, {h:.0f} ms on the hit"
    return None


def side_verdict(obs: Observation, runs: Sequence[Completion], plan: ContextPlan) -> SideVerdict:
    """Judge one side's runs of one probe on their own."""
    if not runs:
        return SideVerdict(None, "not sent: this side already timed out on a shorter prompt")
    for label, r in zip(RUN_LABELS[obs.kind], runs, strict=True):
        if r.error is not None and label != "cut":  # the cut is meant to end in a timeout
            why = f"{label} failed ({r.error.category}): {r.error.message[:160]}"
            return SideVerdict(False, why, errored=True, hung=_timed_out(r))
    if obs.kind is Kind.NEEDLE:
        assert obs.needle is not None
        found = obs.needle.recalled(runs[0].content)
        return SideVerdict(found, f"{'found' if found else 'missed'} the code {obs.needle.code}")
    if obs.kind is Kind.PREFIX_CACHE:
        proof = _hit_proof(runs[0], runs[1], plan)
        if proof is None:
            ttft = (runs[0].timing.ttft_ms, runs[1].timing.ttft_ms)
            return SideVerdict(None, f"cache hit not proven: no cached_tokens, TTFT ms {ttft}")
        same = runs[0].text == runs[1].text and _calls(runs[0]) == _calls(runs[1])
        return SideVerdict(same, f"the hit ({proof}) {'equals' if same else 'differs from'} miss")
    if obs.kind is Kind.STREAM_TEXT:
        return _text_side(runs[0], runs[1])
    if obs.kind is Kind.STREAM_TOOLS:
        return _tools_side(runs[0], runs[1])
    if obs.kind is Kind.CANCEL:
        return _cancel_side(runs[0], runs[1], runs[2])
    leak = reasoning_leak(runs[0])
    return SideVerdict(leak is None, leak or "no reasoning in content")


def _text_side(plain: Completion, streamed: Completion) -> SideVerdict:
    if plain.text != streamed.text:
        pairs = zip(plain.text, streamed.text, strict=False)
        at = next((i for i, (x, y) in enumerate(pairs) if x != y), len(plain.text))
        return SideVerdict(False, f"streamed content differs from non-streamed at char {at}")
    if plain.finish_reason != streamed.finish_reason:
        why = f"finish_reason {plain.finish_reason!r} non-streamed, {streamed.finish_reason!r}"
        return SideVerdict(False, why + " streamed")
    return SideVerdict(True, f"streamed content equals non-streamed ({len(plain.text)} chars)")


def invalid_arguments(runs: Sequence[Completion]) -> str | None:
    """The first tool-call `arguments` string in `runs` that is not a JSON object, or None."""
    calls = (t for r in runs for t in r.tool_calls)
    return next((t.arguments for t in calls if _json_object(t.arguments) is None), None)


def _tools_side(plain: Completion, streamed: Completion) -> SideVerdict:
    if not plain.tool_calls:
        return SideVerdict(None, "no tool call in the non-streamed answer (tools unsupported?)")
    if _calls(plain) != _calls(streamed):
        why = f"streamed calls joined per index {_calls(streamed)} != non-streamed {_calls(plain)}"
        return SideVerdict(False, why[:300])
    return SideVerdict(True, f"{len(plain.tool_calls)} call(s) equal streamed and not")


def _cancel_side(ref: Completion, cut: Completion, after: Completion) -> SideVerdict:
    if cut.error is None:
        return SideVerdict(None, "the stream ended before the cut: cancellation not exercised")
    if cut.error.category is not ErrorCategory.TIMEOUT:
        return SideVerdict(False, f"the stream failed before the cut ({cut.error.category})")
    if after.text != ref.text:
        return SideVerdict(False, "after a stream was cut mid-way, the answer differs from before")
    chunks = len(cut.timing.token_chunk_ns)
    if chunks == 0:
        return SideVerdict(None, "the stream was cut before its first token: not mid-stream")
    return SideVerdict(True, f"cut after {chunks} token chunk(s); the next answer is unchanged")


def judge(obs: Observation, plan: ContextPlan) -> tuple[ProbeStatus, SideVerdict, SideVerdict]:
    """Per-probe status relative to the baseline, with both sides' verdicts."""
    b, c = side_verdict(obs, obs.baseline, plan), side_verdict(obs, obs.candidate, plan)
    if b.ok is None or b.errored:
        return ProbeStatus.INCONCLUSIVE, b, c
    bad = invalid_arguments(obs.candidate)
    if bad is not None and invalid_arguments(obs.baseline) is None:  # FAULTS 30, on any probe
        why = f"tool-call arguments are not a JSON object: {bad[:200]!r}"
        return ProbeStatus.REGRESSED, b, SideVerdict(False, why, category="invalid_tool_args")
    if not b.ok:
        return ProbeStatus.BASELINE_FAIL, b, c
    if c.ok is None:
        return ProbeStatus.INCONCLUSIVE, b, c
    return (ProbeStatus.PASS if c.ok else ProbeStatus.REGRESSED), b, c


def _excerpt(obs: Observation, runs: Sequence[Completion]) -> str:
    if not runs:
        return "<not sent>"
    labelled = zip(RUN_LABELS[obs.kind], runs, strict=True)
    return " | ".join(f"{label}: {describe(r)}" for label, r in labelled)[:600]


def _repro(obs: Observation, url: str) -> str:
    if obs.needle is None:
        return curl(url, "chat", obs.request)
    n = obs.needle  # a long prompt: regenerate it rather than print it
    make = "__import__('servegate.probes.needles', fromlist=['_']).make_needle"
    content = obs.request["messages"][0]["content"]
    tail = content[len(n.prompt) :]  # the prefix-cache probe's follow-up instruction
    prompt = f"{make}({n.seed}, {n.target_tokens}, {n.position!r}).prompt + {tail!r}"
    messages = f"[{{'role': 'user', 'content': {prompt}}}]"
    body = repr({**obs.request, "messages": "MESSAGES"}).replace("'MESSAGES'", messages)
    return curl(url, "chat", {}, python_body=body)


def _findings(
    obs: Observation, url: str, s: ProbeStatus, b: SideVerdict, c: SideVerdict
) -> list[Finding]:
    out: list[tuple[str, Severity, str]] = []
    category = c.category or CATEGORY[obs.kind]
    if s is ProbeStatus.REGRESSED:
        severity = Severity.CRITICAL if c.hung else Severity.MAJOR
        out.append((category, severity, f"regressed: {c.why} (baseline: {b.why})"))
    elif s is ProbeStatus.INCONCLUSIVE:
        side, why = ("baseline", b.why) if b.ok is None or b.errored else ("candidate", c.why)
        out.append((category, Severity.INFO, f"inconclusive on the {side}: {why}"))
    elif s is ProbeStatus.BASELINE_FAIL and obs.kind is not Kind.NEEDLE:
        scope = "an engine property, both sides" if c.ok is False else "the baseline only"
        out.append(
            (category, Severity.INFO, f"baseline-fail ({scope}): {b.why}; candidate {c.why}")
        )
    if invalid_arguments(obs.baseline) is not None and invalid_arguments(obs.candidate):
        bad = invalid_arguments(obs.candidate)
        message = f"tool-call arguments are not a JSON object on both sides: {bad!r}"
        out.append(("invalid_tool_args", Severity.INFO, message[:300]))
    if obs.kind is not Kind.REASONING:  # the reasoning probe judges its own answer above
        pairs = zip(obs.baseline, obs.candidate, strict=False)
        leaks = [leak for x, y in pairs if (leak := reasoning_leak(y)) and not reasoning_leak(x)]
        out += [("reasoning_leak", Severity.MAJOR, leaks[0])] if leaks else []
    return [
        Finding(probe=obs.probe, category=cat, severity=sev, side="candidate", message=msg,
                baseline_excerpt=_excerpt(obs, obs.baseline),
                candidate_excerpt=_excerpt(obs, obs.candidate), curl=_repro(obs, url))
        for cat, sev, msg in out
    ]  # fmt: skip


def evaluate(ev: ContextEvidence, policy: Policy) -> GateResult:
    """Judge every probe relative to the baseline; any regression or leak fails the gate."""
    judged = [(o, *judge(o, ev.plan)) for o in ev.observations]
    findings = [f for o, s, b, c in judged for f in _findings(o, ev.candidate_url, s, b, c)]
    metrics = _metrics(judged)
    blocking = [f for f in findings if f.blocking]
    if all(s is ProbeStatus.INCONCLUSIVE for _, s, _, _ in judged):
        status, summary = Status.INCONCLUSIVE, "no probe could be judged"
    elif blocking:
        status = Status.FAIL
        summary = f"{len(blocking)} blocking finding(s): " + "; ".join(
            f"{f.probe}: {f.category}" for f in blocking[:3]
        )
    else:
        status = Status.PASS
        summary = (
            f"{metrics['pass']} pass, {metrics['baseline_fail']} baseline-fail, "
            f"{metrics['inconclusive']} inconclusive; needles found: baseline "
            f"{metrics['needles_found_baseline']}, candidate {metrics['needles_found_candidate']}"
            f" of {metrics['needles']}"
        )
    rows = [{"probe": o.probe, "kind": str(o.kind), "status": str(s), "baseline": b.why,
             "candidate": c.why} for o, s, b, c in judged]  # fmt: skip
    return GateResult(name=NAME, status=status, summary=summary, metrics=metrics,
                      findings=tuple(findings), details={"probes": rows})  # fmt: skip


Judged = tuple[Observation, ProbeStatus, SideVerdict, SideVerdict]


def _metrics(judged: Sequence[Judged]) -> dict[str, MetricValue]:
    count = {s: sum(1 for _, x, _, _ in judged if x is s) for s in ProbeStatus}
    needles = [(o, b, c) for o, _, b, c in judged if o.kind is Kind.NEEDLE]
    answered = [(b, c) for _, b, c in needles if b.ok is not None and not b.errored]
    tokens = [r.usage.prompt_tokens for o, _, _ in needles for r in o.baseline if r.usage]
    out: dict[str, MetricValue] = {
        "probes": len(judged),
        "pass": count[ProbeStatus.PASS],
        "regressed": count[ProbeStatus.REGRESSED],
        "baseline_fail": count[ProbeStatus.BASELINE_FAIL],
        "inconclusive": count[ProbeStatus.INCONCLUSIVE],
        "needles": len(needles),
        "needles_found_baseline": sum(1 for _, b, _ in needles if b.ok),
        "needles_found_candidate": sum(1 for _, _, c in needles if c.ok),
        "needle_recall_baseline": _rate(sum(1 for b, _ in answered if b.ok), len(answered)),
        "needle_recall_candidate": _rate(sum(1 for _, c in answered if c.ok), len(answered)),
        "needle_prompt_tokens_max": max((t for t in tokens if t is not None), default=None),
    }
    for o, _, b, c in judged:
        if o.kind is Kind.NEEDLE:
            continue
        for side, verdict, runs in (("baseline", b, o.baseline), ("candidate", c, o.candidate)):
            out[f"{o.kind}_ok_{side}"] = verdict.ok
            out.update(_probe_numbers(o.kind, side, runs))
        if o.kind in (Kind.STREAM_TEXT, Kind.STREAM_TOOLS) and len(o.candidate) == 2:
            # across sides, for information: what the answers are is judged by numerics/golden
            b_out, c_out = (
                (o.baseline[1].text, _calls(o.baseline[1])),
                (o.candidate[1].text, _calls(o.candidate[1])),
            )
            out[f"{o.kind}_streamed_equals_baseline"] = b_out == c_out
    return out


def _rate(found: int, total: int) -> float | None:
    return round(found / total, 4) if total else None


def _ms(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def _probe_numbers(kind: Kind, side: str, runs: Sequence[Completion]) -> dict[str, MetricValue]:
    if kind is Kind.PREFIX_CACHE and len(runs) == 2:
        miss, hit = runs
        return {
            f"cache_miss_ttft_ms_{side}": _ms(miss.timing.ttft_ms),
            f"cache_hit_ttft_ms_{side}": _ms(hit.timing.ttft_ms),
            f"cache_hit_cached_tokens_{side}": hit.usage.cached_tokens if hit.usage else None,
        }
    if kind is Kind.CANCEL and len(runs) == 3:
        return {
            f"cancel_chunks_before_cut_{side}": len(runs[1].timing.token_chunk_ns),
            f"cancel_reference_ms_{side}": _ms(runs[0].timing.e2el_ms),
            f"cancel_after_ms_{side}": _ms(runs[2].timing.e2el_ms),
        }
    return {}
