"""How the startup gate judges: readiness, the model list, the over-long and over-capacity
prompts, lost capabilities, the managed launches and hangs (pure: no I/O here)."""

from __future__ import annotations

from servegate.config.models import Policy
from servegate.gates.evidence import curl, describe
from servegate.gates.sizing import IMPOSSIBLE_WORD, context_in_error
from servegate.gates.startup.canary import judge_canaries
from servegate.gates.startup.capacity import judge_capacity
from servegate.gates.startup.launch import judge_launch, launch_metrics
from servegate.gates.startup.plan import NAME, READY_REQUEST, SideEvidence, StartupEvidence
from servegate.verdict.judgement import check, gate_result, not_measured
from servegate.verdict.model import Check, Finding, GateResult, MetricValue, Severity

# Each step's checks and findings, in the order the report lists them.
Judged = tuple[list[Check], list[Finding]]
READY_TITLE = "a real 1-token completion on both sides"


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
    metrics, details = _metrics(ev), _capability_details(ev)
    if not ev.baseline.ready.ok:
        return _baseline_not_ready(ev, strict=strict, metrics=metrics, details=details)
    impossible = _impossible_findings(ev, policy)
    capacity: Judged = judge_capacity(*ev.capacity, policy) if ev.capacity is not None else ([], [])
    steps = (
        _ready(ev),
        _models(ev),
        (_impossible_checks(ev, policy, impossible), impossible),
        _capabilities(ev),
        judge_launch(ev.baseline_launch, ev.candidate_launch),
        capacity,
        judge_canaries(ev.canaries, ev.candidate.base_url),
    )
    checks = [c for step_checks, _ in steps for c in step_checks]
    findings = [f for _, step_findings in steps for f in step_findings]
    checks.append(_hangs(impossible + capacity[1], policy))
    return gate_result(
        NAME, checks, strict=strict, findings=findings, metrics=metrics, details=details
    )


def _metrics(ev: StartupEvidence) -> dict[str, MetricValue]:
    """Ready times, the over-long prompt (its size, answers and times) and the launches."""
    b, c = ev.baseline, ev.candidate
    return {
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


def _capability_details(ev: StartupEvidence) -> dict[str, object]:
    """Each side's discovered capabilities, for the report's details."""
    return {
        "capabilities": {
            side.name: {
                k: {"supported": v.supported, "detail": v.detail}
                for k, v in side.capabilities.items()
            }
            for side in (ev.baseline, ev.candidate)
        }
    }


def _baseline_not_ready(
    ev: StartupEvidence,
    *,
    strict: bool,
    metrics: dict[str, MetricValue],
    details: dict[str, object],
) -> GateResult:
    """The baseline did not answer a 1-token completion: nothing can be judged."""
    b = ev.baseline
    finding = Finding(
        probe="ready",
        category=str(b.ready.error.category) if b.ready.error else "error",
        severity=Severity.INFO,
        side=b.name,
        message="the baseline did not answer a 1-token completion; nothing can be judged",
        baseline_excerpt=describe(b.ready),
    )
    why = f"the baseline is not ready: {describe(b.ready)}"
    checks = [not_measured("ready", READY_TITLE, why, core=True)]
    return gate_result(
        NAME, checks, strict=strict, findings=[finding], metrics=metrics, details=details
    )


def _ready(ev: StartupEvidence) -> Judged:
    """The candidate answers a real 1-token completion (the baseline did)."""
    b, c = ev.baseline, ev.candidate
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
    ready = check(
        "ready",
        READY_TITLE,
        failed=not c.ready.ok,
        core=True,
        baseline=_ms(b.ready_ms),
        candidate=_ms(c.ready_ms) if c.ready.ok else describe(c.ready),
        reason="" if c.ready.ok else "the candidate is not ready",
        row="ready time",
    )
    return [ready], findings


def _models(ev: StartupEvidence) -> Judged:
    """GET /models still lists a model where the baseline's did."""
    b, c = ev.baseline, ev.candidate
    lost_models = bool(b.models) and not c.models
    findings = (
        [
            Finding(
                probe="models",
                category="models",
                severity=Severity.MAJOR,
                side=c.name,
                message=f"GET /models answered {c.models_status} with no model list",
            )
        ]
        if lost_models
        else []
    )
    models = check(
        "models",
        "GET /models lists the model",
        failed=lost_models if b.models else None,
        baseline=", ".join(b.models) or "-",
        candidate=", ".join(c.models) or "-",
        reason="the baseline lists no models" if not b.models else "",
    )
    return [models], findings


def _impossible_checks(
    ev: StartupEvidence, policy: Policy, impossible: list[Finding]
) -> list[Check]:
    """The over-long prompt is rejected fast; not measured when the baseline did not reject it."""
    b, c = ev.baseline, ev.candidate
    title = "a prompt longer than the context is rejected fast"
    not_judged = [f for f in impossible if f.category == "not_judged"]
    if not_judged:
        return [not_measured("impossible_request", title, not_judged[0].message)]
    return [
        check(
            "impossible_request",
            title,
            failed=any(f.blocking for f in impossible),
            baseline=f"{b.impossible.status} in {b.impossible_ms:.0f} ms",
            candidate=f"{c.impossible.status} in {c.impossible_ms:.0f} ms",
            limit=f"rejected within {policy.impossible_reject_s:g} s",
            policy_key="impossible_reject_s",
            reason="; ".join(f.message for f in impossible if f.blocking)[:300],
        )
    ]


def _capabilities(ev: StartupEvidence) -> Judged:
    """The candidate keeps the capabilities the baseline has; those it did not answer about
    in time are not measured."""
    b = ev.baseline
    caps = _capability_findings(ev)
    lost = [f.probe.removeprefix("capability:") for f in caps if f.category == "capability_lost"]
    unknown = [
        f.probe.removeprefix("capability:") for f in caps if f.category == "capability_unknown"
    ]
    checks = [
        check(
            "capabilities",
            "capabilities the baseline has",
            failed=bool(lost) if b.capabilities else None,
            baseline=", ".join(k for k, v in b.capabilities.items() if v.supported) or "-",
            candidate=f"lost: {', '.join(lost)}" if lost else "none lost",
            reason=f"the candidate refuses {', '.join(lost)}"
            if lost
            else "capability discovery did not run"
            if not b.capabilities
            else "",
        )
    ]
    if unknown:
        checks.append(
            not_measured(
                "capabilities_unknown",
                "capabilities the candidate did not answer about",
                f"no answer in time: {', '.join(unknown)}",
            )
        )
    return checks, caps


def _hangs(findings: list[Finding], policy: Policy) -> Check:
    """The requests that hung (the over-long and over-capacity prompts) within `hangs_max`."""
    hang = [f for f in findings if f.category == "timeout"]
    return check(
        "hangs",
        "requests that hung",
        failed=len(hang) > policy.hangs_max,
        candidate=str(len(hang)),
        limit=f"≤ {policy.hangs_max}",
        policy_key="hangs_max",
        row="hangs",
    )


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f} ms"
