"""Gate 1, startup: both sides serve a real completion, list models, reject the impossible fast.

`/health` can stay green while inference is dead (vLLM #35541), so readiness is a real 1-token
completion; a prompt longer than the context must be rejected quickly, never hang.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from servegate.config.models import GateConfig, Policy
from servegate.endpoints.protocol import Endpoint
from servegate.endpoints.types import Completion, RawResponse
from servegate.gates.capabilities import Capability, discover
from servegate.gates.evidence import curl, describe
from servegate.gates.pair import EndpointPair
from servegate.gates.sizing import IMPOSSIBLE_WORD, ImpossibleSize, context_in_error, size
from servegate.gates.startup.capacity import CapacityEvidence, collect_side, judge_capacity
from servegate.gates.startup.launch import judge_launch, launch_metrics
from servegate.managed.launch_evidence import LaunchEvidence
from servegate.verdict.judgement import check, gate_result, not_measured
from servegate.verdict.model import Finding, GateResult, Severity

NAME = "startup"
READY_REQUEST = {"prompt": "Hello", "max_tokens": 1, "temperature": 0}
# After an over-long prompt timed out, wait up to this many probe deadlines for the side to answer
# a 1-token completion again.
RECOVERY_PROBES = 10


@dataclass(frozen=True)
class SideEvidence:
    """What one side showed at start-up."""

    name: str
    base_url: str
    models_status: int | None
    models: tuple[str, ...]
    ready: Completion
    ready_ms: float | None
    impossible: Completion
    impossible_ms: float
    capabilities: dict[str, Capability] = field(default_factory=dict)
    # After the over-long prompt timed out: ms from giving up on it until a 1-token completion
    # was answered again (None: never within the recovery window, or it did not time out).
    recovered_ms: float | None = None
    recovery_window_s: float = 0.0


@dataclass(frozen=True)
class StartupEvidence:
    baseline: SideEvidence
    candidate: SideEvidence
    impossible_words: int
    impossible_deadline_s: float
    # Managed sides only: what starting the engine showed (times, log pattern hits).
    baseline_launch: LaunchEvidence | None = None
    candidate_launch: LaunchEvidence | None = None
    sizing: ImpossibleSize | None = None  # how the over-long prompt's length was found
    # The over-KV-capacity prompt (startup_capacity), baseline and candidate; sent last.
    capacity: tuple[CapacityEvidence, CapacityEvidence] | None = None


def _model_ids(resp: RawResponse) -> tuple[str, ...]:
    if not resp.ok:
        return ()
    try:
        data = resp.json().get("data", [])
        return tuple(str(m["id"]) for m in data if isinstance(m, dict) and "id" in m)
    except (ValueError, AttributeError, TypeError):
        return ()


async def _side(pair: EndpointPair, ep: Endpoint, cfg: GateConfig, words: int) -> SideEvidence:
    listing = pair.recording(ep, gate=NAME, probe="models")
    models = await listing.raw("GET", "/models", deadline_s=cfg.probe_deadline_s)
    t0 = time.perf_counter()
    ready = await ep.completion(pair.body(READY_REQUEST), deadline_s=cfg.probe_deadline_s)
    ready_ms = (time.perf_counter() - t0) * 1e3 if ready.ok else None
    pair.recorder.record(
        gate=NAME,
        probe="ready",
        side=ep.name,
        api="completions",
        request=pair.body(READY_REQUEST),
        result=ready,
    )
    # Capabilities first, the over-long prompt last: a server that does not reject that prompt
    # may keep computing it after the client gave up (transformers serve 5.24 does), and every
    # probe queued behind it would time out — read as "could not be checked" when it was the
    # over-long prompt that held the server.
    prober = pair.recording(ep, gate=NAME, probe="capabilities")
    caps = await discover(prober, pair.model, deadline_s=cfg.probe_deadline_s) if ready.ok else {}
    impossible_body = pair.body(
        {
            "prompt": IMPOSSIBLE_WORD * words,
            "max_tokens": 16,
            "temperature": 0,
        }
    )
    t0 = time.perf_counter()
    impossible = await ep.completion(impossible_body, deadline_s=cfg.probe_deadline_s)
    impossible_ms = (time.perf_counter() - t0) * 1e3
    pair.recorder.record(
        gate=NAME,
        probe="impossible-request",
        side=ep.name,
        api="completions",
        request=impossible_body,
        result=impossible,
    )
    recovered_ms, window_s = None, 0.0
    # Only a side that answered the ready request can be waited for: one that answered nothing
    # is hung, not busy, and waiting would only delay the verdict.
    if ready.ok and impossible.error is not None and impossible.error.hung:
        # A server that keeps computing a request its client abandoned answers every later
        # request late: wait until it answers again, so the gates after this one measure the
        # server and not this probe's leftovers, and say how long that took.
        window_s = cfg.probe_deadline_s * RECOVERY_PROBES
        recovered_ms = await _recovery_ms(pair, ep, cfg.probe_deadline_s, window_s)
    return SideEvidence(
        name=ep.name,
        base_url=ep.base_url,
        models_status=models.status,
        models=_model_ids(models),
        ready=ready,
        ready_ms=ready_ms,
        impossible=impossible,
        impossible_ms=impossible_ms,
        capabilities=caps,
        recovered_ms=recovered_ms,
        recovery_window_s=window_s,
    )


async def _recovery_ms(
    pair: EndpointPair, ep: Endpoint, deadline_s: float, window_s: float
) -> float | None:
    probe = pair.recording(ep, gate=NAME, probe="impossible-request:recovery")
    t0 = time.perf_counter()
    while (time.perf_counter() - t0) < window_s:
        again = await probe.completion(pair.body(READY_REQUEST), deadline_s=deadline_s)
        if again.ok:
            return (time.perf_counter() - t0) * 1e3
        if (
            again.status is not None
            or again.error is None
            or again.error.category
            not in (
                "timeout",
                "stalled",
            )
        ):
            await asyncio.sleep(min(1.0, deadline_s))
    return None


async def collect(pair: EndpointPair, cfg: GateConfig) -> StartupEvidence:
    """Size the over-long prompt from both sides' contexts, then probe both, baseline first."""
    sized = await size(pair, cfg, NAME)
    baseline = await _side(pair, pair.baseline, cfg, sized.words)
    candidate = await _side(pair, pair.candidate, cfg, sized.words)
    capacity = (
        await collect_side(pair, pair.baseline, cfg),
        await collect_side(pair, pair.candidate, cfg),
    )
    return StartupEvidence(
        baseline,
        candidate,
        sized.words,
        cfg.probe_deadline_s,
        sizing=sized,
        baseline_launch=pair.launches.get(pair.baseline.name),
        candidate_launch=pair.launches.get(pair.candidate.name),
        capacity=capacity,
    )


def _rejected_fast(side: SideEvidence, policy: Policy) -> bool:
    err = side.impossible.error
    return (
        err is not None
        and err.category in ("rejected", "error_body")
        and side.impossible_ms <= policy.impossible_reject_s * 1e3
    )


def _recovery_note(side: SideEvidence) -> str:
    if side.recovery_window_s <= 0:
        return ""
    if side.recovered_ms is None:
        return (
            f"; it answered nothing else for {side.recovery_window_s:.0f} s after servegate gave "
            "up on that prompt"
        )
    seconds = side.recovered_ms / 1e3
    note = f"; a 1-token completion sent after it was answered {seconds:.1f} s later"
    if seconds >= 1.0:
        note += " (the server kept computing the abandoned request; what queued behind it waited)"
    return note


def _context_of(ev: StartupEvidence, side: str) -> int | None:
    """The side's context in tokens: as discovered before the probe, else as its rejection of
    the over-long prompt named it."""
    known = ev.sizing.context_tokens.get(side) if ev.sizing else None
    if known is not None:
        return known
    answer = (ev.baseline if side == "baseline" else ev.candidate).impossible
    return context_in_error(answer.error.message) if answer.error else None


def _impossible_findings(ev: StartupEvidence, policy: Policy) -> list[Finding]:
    b, c = ev.baseline, ev.candidate
    python_body = f"{{'prompt': {IMPOSSIBLE_WORD!r} * {ev.impossible_words}, 'max_tokens': 16}}"
    repro = curl(c.base_url, "completions", {}, python_body=python_body)
    cerr = c.impossible.error
    if cerr is not None and cerr.hung:
        return [
            Finding(
                probe="impossible-request",
                category="timeout",
                severity=Severity.CRITICAL,
                side=c.name,
                message=(
                    f"a prompt longer than the context ({ev.impossible_words} words) got no answer "
                    f"within {ev.impossible_deadline_s:.0f} s: the server hangs instead of "
                    "rejecting it (the vLLM #35541 class)" + _recovery_note(c)
                ),
                baseline_excerpt=f"{describe(b.impossible)} in {b.impossible_ms:.0f} ms",
                candidate_excerpt=f"{describe(c.impossible)} after {c.impossible_ms:.0f} ms",
                curl=repro,
            )
        ]
    if not _rejected_fast(b, policy):
        return [
            Finding(
                probe="impossible-request",
                category="not_judged",
                severity=Severity.INFO,
                message="the baseline did not reject the over-long prompt quickly, so the "
                "candidate is not judged on it ("
                + (ev.sizing.describe() if ev.sizing else f"{ev.impossible_words} words")
                + "; --impossible-words sets the length when the context cannot be discovered)",
                baseline_excerpt=f"{describe(b.impossible)} in {b.impossible_ms:.0f} ms",
            )
        ]
    if _rejected_fast(c, policy):
        return []
    if cerr is not None and cerr.category in ("rejected", "error_body"):
        msg = f"rejected the over-long prompt only after {c.impossible_ms:.0f} ms"
    elif cerr is not None:
        msg = f"failed the over-long prompt with {cerr.category} instead of rejecting it"
    else:
        msg = "accepted a prompt longer than the context that the baseline rejected"
    return [
        Finding(
            probe="impossible-request",
            category="impossible_request",
            severity=Severity.MAJOR,
            side=c.name,
            message=msg,
            baseline_excerpt=f"{describe(b.impossible)} in {b.impossible_ms:.0f} ms",
            candidate_excerpt=f"{describe(c.impossible)} in {c.impossible_ms:.0f} ms",
            curl=repro,
        )
    ]


def _capability_findings(ev: StartupEvidence) -> list[Finding]:
    out = []
    for name, base in ev.baseline.capabilities.items():
        cand = ev.candidate.capabilities.get(name)
        if base.supported and cand is not None and cand.supported is not True:
            # Refused outright is a regression; no answer at all (timeout) leaves it unknown.
            lost = cand.supported is False
            out.append(
                Finding(
                    probe=f"capability:{name}",
                    category="capability_lost" if lost else "capability_unknown",
                    severity=Severity.MAJOR if lost else Severity.MINOR,
                    side=ev.candidate.name,
                    message=f"the baseline supports {name} and the candidate "
                    + ("does not" if lost else "could not be checked"),
                    baseline_excerpt=base.detail,
                    candidate_excerpt=cand.detail,
                )
            )
    return out


def evaluate(ev: StartupEvidence, policy: Policy, *, strict: bool = False) -> GateResult:
    """Judge start-up: readiness, models, the impossible request, lost capabilities."""
    b, c = ev.baseline, ev.candidate
    metrics: dict[str, float | int | str | bool | None] = {
        "baseline_ready_ms": b.ready_ms,
        "candidate_ready_ms": c.ready_ms,
        "impossible_words": ev.impossible_words,
        "impossible_sizing": ev.sizing.describe() if ev.sizing else None,
        "baseline_context_tokens": _context_of(ev, "baseline"),
        "candidate_context_tokens": _context_of(ev, "candidate"),
        "baseline_impossible_ms": round(b.impossible_ms, 1),
        "candidate_impossible_ms": round(c.impossible_ms, 1),
        "baseline_impossible_status": b.impossible.status,
        "candidate_impossible_status": c.impossible.status,
        # After hanging on the over-long prompt: until a 1-token completion was answered again.
        "candidate_impossible_recovered_ms": c.recovered_ms,
        **launch_metrics(ev.baseline_launch, ev.candidate_launch),
    }
    details = {
        "capabilities": {
            side.name: {
                k: {"supported": v.supported, "detail": v.detail}
                for k, v in side.capabilities.items()
            }
            for side in (b, c)
        }
    }
    ready_title = "a real 1-token completion on both sides"
    if not b.ready.ok:
        finding = Finding(
            probe="ready",
            category=str(b.ready.error.category) if b.ready.error else "error",
            severity=Severity.INFO,
            side=b.name,
            message="the baseline did not answer a 1-token completion; nothing can be judged",
            baseline_excerpt=describe(b.ready),
        )
        why = f"the baseline is not ready: {describe(b.ready)}"
        checks = [not_measured("ready", ready_title, why, core=True)]
        return gate_result(
            NAME, checks, strict=strict, findings=[finding], metrics=metrics, details=details
        )
    findings: list[Finding] = []
    if not c.ready.ok:
        findings.append(
            Finding(
                probe="ready",
                category=str(c.ready.error.category) if c.ready.error else "error",
                severity=Severity.CRITICAL,
                side=c.name,
                message="the candidate did not answer a 1-token completion",
                candidate_excerpt=describe(c.ready),
                curl=curl(c.base_url, "completions", READY_REQUEST),
            )
        )
    checks = [
        check(
            "ready",
            ready_title,
            failed=not c.ready.ok,
            core=True,
            baseline=_ms(b.ready_ms),
            candidate=_ms(c.ready_ms) if c.ready.ok else describe(c.ready),
            reason="" if c.ready.ok else "the candidate is not ready",
            row="ready time",
        ),
    ]
    lost_models = bool(b.models) and not c.models
    if lost_models:
        findings.append(
            Finding(
                probe="models",
                category="models",
                severity=Severity.MAJOR,
                side=c.name,
                message=f"GET /models answered {c.models_status} with no model list",
            )
        )
    checks.append(
        check(
            "models",
            "GET /models lists the model",
            failed=lost_models if b.models else None,
            baseline=", ".join(b.models) or "-",
            candidate=", ".join(c.models) or "-",
            reason="the baseline lists no models" if not b.models else "",
        )
    )
    impossible = _impossible_findings(ev, policy)
    findings += impossible
    title = "a prompt longer than the context is rejected fast"
    not_judged = [f for f in impossible if f.category == "not_judged"]
    checks.append(
        not_measured("impossible_request", title, not_judged[0].message)
        if not_judged
        else check(
            "impossible_request",
            title,
            failed=any(f.blocking for f in impossible),
            baseline=f"{b.impossible.status} in {b.impossible_ms:.0f} ms",
            candidate=f"{c.impossible.status} in {c.impossible_ms:.0f} ms",
            limit=f"rejected within {policy.impossible_reject_s:g} s",
            policy_key="impossible_reject_s",
            reason="; ".join(f.message for f in impossible if f.blocking)[:300],
        )
    )
    caps = _capability_findings(ev)
    findings += caps
    lost = [f.probe.removeprefix("capability:") for f in caps if f.category == "capability_lost"]
    unknown = [
        f.probe.removeprefix("capability:") for f in caps if f.category == "capability_unknown"
    ]
    cap_title = "capabilities the baseline has"
    checks.append(
        check(
            "capabilities",
            cap_title,
            failed=bool(lost) if b.capabilities else None,
            baseline=", ".join(k for k, v in b.capabilities.items() if v.supported) or "-",
            candidate=f"lost: {', '.join(lost)}" if lost else "none lost",
            reason=f"the candidate refuses {', '.join(lost)}"
            if lost
            else "capability discovery did not run"
            if not b.capabilities
            else "",
        )
    )
    if unknown:
        checks.append(
            not_measured(
                "capabilities_unknown",
                "capabilities the candidate did not answer about",
                f"no answer in time: {', '.join(unknown)}",
            )
        )
    launch_checks, launch_findings = judge_launch(ev.baseline_launch, ev.candidate_launch)
    checks += launch_checks
    findings += launch_findings
    if ev.capacity is not None:
        capacity_checks, capacity_findings = judge_capacity(*ev.capacity, policy)
        checks += capacity_checks
        findings += capacity_findings
        impossible = impossible + [f for f in capacity_findings if f.category == "timeout"]
    hang = [f for f in impossible if f.category == "timeout"]
    checks.append(
        check(
            "hangs",
            "requests that hung",
            failed=len(hang) > policy.hangs_max,
            candidate=str(len(hang)),
            limit=f"≤ {policy.hangs_max}",
            policy_key="hangs_max",
            row="hangs",
        )
    )
    return gate_result(
        NAME, checks, strict=strict, findings=findings, metrics=metrics, details=details
    )


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f} ms"
