"""How the context gate judges: per-side verdicts, relative status, findings and metrics."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from servegate.config.models import Policy
from servegate.endpoints.errors import ErrorCategory
from servegate.endpoints.json_text import parse_json
from servegate.endpoints.text import FINDING_CHARS, clip
from servegate.endpoints.types import Completion
from servegate.gates.context.plan import (
    CATEGORY,
    LONG_NEEDLE_SHARE,
    NAME,
    RUN_LABELS,
    THINK_TAG,
    ContextEvidence,
    ContextPlan,
    Kind,
    StepObservation,
)
from servegate.gates.evidence import curl, describe
from servegate.gates.golden.probe import ProbeStatus
from servegate.gates.pair import timed_out
from servegate.verdict.judgement import check, gate_result, not_measured
from servegate.verdict.model import Check, Finding, GateResult, MetricValue, Severity


@dataclass(frozen=True)
class SideVerdict:
    """One side's result on one probe; ok is None when it could not be measured there."""

    ok: bool | None
    why: str
    category: str | None = None  # overrides the probe's category (invalid_tool_args)
    errored: bool = False
    hung: bool = False


def _json_object(raw: str) -> dict[str, Any] | None:
    value, error = parse_json(raw)
    return value if error is None and isinstance(value, dict) else None


def _calls(c: Completion) -> tuple[tuple[str | None, object], ...]:
    ordered = sorted(c.tool_calls, key=lambda t: t.index)
    return tuple((t.name, _json_object(t.arguments) or t.arguments) for t in ordered)


def reasoning_leak(c: Completion) -> str | None:
    """Why `c`'s content carries reasoning (it repeats `reasoning`, or has think tags), or None."""
    head = (c.reasoning or "").strip()[:80]
    if len(head) >= 12 and head in c.text:
        return f"content repeats the reasoning ({head[:40]!r}…)"
    tag = THINK_TAG.search(c.text)
    return f"content carries a {tag.group(0)!r} tag" if tag else None


def _hit_proof(miss: Completion, hit: Completion, plan: ContextPlan) -> str | None:
    cached = hit.usage.cached_tokens if hit.usage is not None else None
    if cached:
        return f"cached_tokens={cached}"
    m, h = miss.timing.ttft_ms, hit.timing.ttft_ms
    if m is not None and h is not None and h <= plan.hit_ttft_ratio_max * m and m - h >= 20:
        return f"TTFT {m:.0f} ms on the miss, {h:.0f} ms on the hit"
    return None


def side_verdict(
    obs: StepObservation, runs: Sequence[Completion], plan: ContextPlan
) -> SideVerdict:
    """Judge one side's runs of one probe on their own."""
    if not runs:
        return SideVerdict(None, "not sent: this side already timed out on a shorter prompt")
    for label, r in zip(RUN_LABELS[obs.kind], runs, strict=True):
        if r.error is not None and label != "cut":  # the cut is meant to end in a timeout
            why = f"{label} failed ({r.error.category}): {r.error.message[:160]}"
            if timed_out(r) or r.error.category is ErrorCategory.NOT_SENT:
                # Time is not content: a hang is judged as a hang, the answer is not measured.
                return SideVerdict(None, why, errored=True, hung=timed_out(r))
            return SideVerdict(False, why, errored=True)
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


def judge(obs: StepObservation, plan: ContextPlan) -> tuple[ProbeStatus, SideVerdict, SideVerdict]:
    """Per-probe status relative to the baseline, with both sides' verdicts."""
    b, c = side_verdict(obs, obs.baseline, plan), side_verdict(obs, obs.candidate, plan)
    if b.ok is None or b.errored:
        return ProbeStatus.INCONCLUSIVE, b, c
    bad = invalid_arguments(obs.candidate)
    if bad is not None and invalid_arguments(obs.baseline) is None:  # FAULTS 30, on any probe
        why = f"tool-call arguments are not a JSON object: {bad[:200]!r}"
        return ProbeStatus.REGRESSED, b, SideVerdict(False, why, category="invalid_tool_args")
    if c.hung:
        return ProbeStatus.INCONCLUSIVE, b, c
    if not b.ok:
        return ProbeStatus.BASELINE_FAIL, b, c
    if c.ok is None:
        return ProbeStatus.INCONCLUSIVE, b, c
    return (ProbeStatus.PASS if c.ok else ProbeStatus.REGRESSED), b, c


def _excerpt(obs: StepObservation, runs: Sequence[Completion]) -> str:
    if not runs:
        return "<not sent>"
    labelled = zip(RUN_LABELS[obs.kind], runs, strict=True)
    # Several answers side by side: room for three of them at FINDING_CHARS each.
    return clip(" | ".join(f"{label}: {describe(r)}" for label, r in labelled), 3 * FINDING_CHARS)


def _findings(
    obs: StepObservation, url: str, s: ProbeStatus, b: SideVerdict, c: SideVerdict
) -> list[Finding]:
    out: list[tuple[str, Severity, str]] = []
    category = c.category or CATEGORY[obs.kind]
    if s is ProbeStatus.REGRESSED:
        out.append((category, Severity.MAJOR, f"regressed: {c.why} (baseline: {b.why})"))
    elif c.hung:
        why = f"{c.why}, after a deadline scaled to the baseline's own time and one retry"
        out.append(("timeout", Severity.CRITICAL, f"hung: {why} (baseline: {b.why})"))
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
                candidate_excerpt=_excerpt(obs, obs.candidate), curl=curl(url, "chat", obs.request))
        for cat, sev, msg in out
    ]  # fmt: skip


def _long_needle_check(ev: ContextEvidence) -> Check:
    """Whether recall was measured far into the context: a needle at 80 % of the smaller
    discovered context, with what it cost; not measured when no side says its context."""
    title = f"a needle at {LONG_NEEDLE_SHARE:.0%} of the context"
    if ev.context_tokens is None:
        return not_measured("long_needle", title, "a custom needle plan was given")
    known = {s: t for s, t in ev.context_tokens.items() if t is not None}
    if not known:
        why = "neither side says its context length (/v1/models, /props): needles stop at " + (
            f"{max((n for n, _ in ev.plan.needles), default=0)} tokens"
        )
        return not_measured("long_needle", title, why)
    if ev.long_needle_tokens is None:
        longest = max((n for n, _ in ev.plan.needles), default=0)
        return check("long_needle", title, failed=False, candidate=f"{longest} tokens",
                     baseline=f"context {min(known.values())} tokens",
                     limit="the plan's needles already reach it")  # fmt: skip
    n = ev.long_needle_tokens
    probe = next((o for o in ev.observations if o.needle is not None
                  and o.needle.target_tokens == n), None)  # fmt: skip
    took = [r.timing.e2el_ms for r in (*probe.baseline, *probe.candidate)] if probe else []
    cost = max((t for t in took if t is not None), default=None)
    recalled = probe is not None and bool(probe.candidate) and probe.candidate[0].ok
    return check(
        "long_needle",
        title,
        failed=False if recalled else None,
        candidate=f"{n} tokens" + (f", {cost / 1e3:.0f} s at most per side" if cost else ""),
        baseline=f"context {min(known.values())} tokens",
        limit="judged with every needle (long-context recall)",
        reason="" if recalled else "the candidate did not answer the long needle",
    )


def evaluate(ev: ContextEvidence, policy: Policy, *, strict: bool = False) -> GateResult:
    """Judge every probe relative to the baseline: a regression or a leak fails the gate, a hang
    counts as a hang (never as a content regression), and what was not measured is listed."""
    judged = [(o, *judge(o, ev.plan)) for o in ev.observations]
    findings = [f for o, s, b, c in judged for f in _findings(o, ev.candidate_url, s, b, c)]
    metrics = _metrics(judged)
    regressed = [o.probe for o, s, _, _ in judged if s is ProbeStatus.REGRESSED]
    other = [f for f in findings if f.blocking and f.category != "timeout"]
    hangs = sum(1 for f in findings if f.category == "timeout")
    # A regression needs a baseline that passes and a candidate that answered.
    scored = [o for o, s, _, _ in judged if s in (ProbeStatus.PASS, ProbeStatus.REGRESSED)]
    attempted = [r for o, _, _, _ in judged for r in o.candidate if r.error is None
                 or r.error.category != "not_sent"]  # fmt: skip
    rb, rc = metrics["needle_recall_baseline"], metrics["needle_recall_candidate"]
    recall_known = isinstance(rb, float) and isinstance(rc, float)
    checks = [
        check("regressions", "probes regressed", core=True,
              failed=True if regressed or other else (False if scored else None),
              candidate=f"{len(regressed)} of {len(scored)} judged", limit="0",
              reason="; ".join(f"{f.probe}: {f.category}" for f in other[:3])),
        check("needle_recall", "long-context recall", row="long-context recall",
              failed=(float(rc) < float(rb)) if recall_known else None,  # type: ignore[arg-type]
              baseline=_pct(rb), candidate=_pct(rc), limit="not lower than baseline",
              reason="no needle answered on both sides" if not recall_known else
              ("the candidate recalled fewer needles" if recall_known and
               float(rc) < float(rb) else "")),  # type: ignore[arg-type]
        check("hangs", "requests that hung", failed=hangs > policy.hangs_max if attempted else None,
              candidate=str(hangs), limit=f"≤ {policy.hangs_max}", policy_key="hangs_max",
              row="hangs"),
    ]  # fmt: skip
    checks.append(_long_needle_check(ev))
    unjudged = [(o, b, c) for o, s, b, c in judged if s is ProbeStatus.INCONCLUSIVE]
    if unjudged:
        why = "; ".join(f"{o.probe}: {(b if b.ok is None or b.errored else c).why}"
                        for o, b, c in unjudged)[:500]  # fmt: skip
        checks.append(not_measured("unjudged_probes", "probes that could not be judged", why))
    rows = [{"probe": o.probe, "kind": str(o.kind), "status": str(s), "baseline": b.why,
             "candidate": c.why} for o, s, b, c in judged]  # fmt: skip
    return gate_result(NAME, checks, strict=strict, findings=findings, metrics=metrics,
                       details={"probes": rows})  # fmt: skip


def _pct(value: MetricValue) -> str:
    return f"{value:.0%}" if isinstance(value, float) else "-"


Judged = tuple[StepObservation, ProbeStatus, SideVerdict, SideVerdict]


def _metrics(judged: Sequence[Judged]) -> dict[str, MetricValue]:
    count = {s: sum(1 for _, x, _, _ in judged if x is s) for s in ProbeStatus}
    needles = [(o, b, c) for o, _, b, c in judged if o.kind is Kind.NEEDLE]
    answered = [
        (b, c) for _, b, c in needles if b.ok is not None and not b.errored and c.ok is not None
    ]
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
