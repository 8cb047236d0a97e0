"""How the golden gate judges: per-probe statuses (golden_probe.py) into findings and checks."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from servegate.config.models import Policy
from servegate.endpoints.answers import degenerate_relative, same_answer
from servegate.endpoints.types import Completion
from servegate.gates.evidence import curl, describe
from servegate.gates.golden.probe import (
    NAME,
    GoldenEvidence,
    Judged,
    ProbeStatus,
    judge,
    self_flips,
)
from servegate.gates.golden.rates import category_rates
from servegate.stats import PairedCounts, mcnemar_exact
from servegate.stats.degeneration import degeneration_metrics, is_severe, severe_kind
from servegate.stats.divergence import near_tie_limit, noise_limit
from servegate.verdict.judgement import (
    at_most,
    check,
    gate_result,
    not_applicable,
    not_measured,
)
from servegate.verdict.model import Check, Divergence, Finding, GateResult, MetricValue, Severity

_COMPARED = (
    ProbeStatus.PASS,
    ProbeStatus.REGRESSED,
    ProbeStatus.WITHIN_NOISE,
    ProbeStatus.EXPLAINED,
)
ROWS = {
    "canary": "deterministic pass rate",
    "structured": "structured parse rate",
    "degeneration": "severe degeneration",
    "hangs": "hangs",
}


def _finding(
    j: Judged,
    ev: GoldenEvidence,
    category: str,
    severity: Severity,
    message: str,
    *,
    streamed: bool = False,
) -> Finding:
    obs = j.obs
    body = {
        **obs.probe.request,
        **({"stream": True} if streamed else {}),
        **({"model": ev.model} if ev.model else {}),
    }
    b, c = (
        (obs.baseline_stream, obs.candidate_stream) if streamed else (obs.baseline, obs.candidate)
    )
    return Finding(
        probe=obs.probe.id + (":stream" if streamed else ""),
        category=category,
        severity=severity,
        side="candidate",
        message=message,
        baseline_excerpt=describe(b),
        candidate_excerpt=describe(c),
        curl=curl(ev.candidate_url, obs.probe.api, body),
    )


def baseline_kinds(ev: GoldenEvidence) -> Counter[str]:
    """The kinds of severe degeneration the baseline itself shows, on any of its paths (plain,
    streamed, cache hit), with how many of its answers show each."""
    kinds: Counter[str] = Counter()
    for o in ev.observations:
        for b in (o.baseline, o.baseline_stream, o.baseline_hit):
            if b.ok and (found := severe_kind(degeneration_metrics(b.text))) is not None:
                kinds[found[0]] += 1
    return kinds


def _content_findings(j: Judged, ev: GoldenEvidence, kinds: Counter[str]) -> list[Finding]:
    """Degeneration and failed requests on the plain and the streamed answer. Degeneration of a
    kind the baseline never shows blocks on its own; of a kind it shows too (a small model
    looping on a long output), it is judged as a paired rate (`_degeneration_rate`)."""
    obs, out = j.obs, []
    for streamed, b, c in (
        (False, obs.baseline, obs.candidate),
        (True, obs.baseline_stream, obs.candidate_stream),
    ):
        if c.error is not None and b.error is None:
            if c.error.hung:
                msg = "no answer within the deadline scaled to the baseline's latency, twice"
                out.append(_finding(j, ev, "timeout", Severity.CRITICAL, msg, streamed=streamed))
            elif c.error.category != "not_sent":
                msg = f"the candidate failed the request ({c.error.category}) the baseline served"
                out.append(
                    _finding(
                        j, ev, str(c.error.category), Severity.CRITICAL, msg, streamed=streamed
                    )
                )
            continue
        if not (b.ok and c.ok):
            continue
        if found := degenerate_relative(c.text, b.text):
            kind, why = found
            if kind in kinds:
                msg = (
                    f"degenerate output ({kind}: {why}), a kind the baseline shows too "
                    f"({kinds[kind]} of its answers): judged as a paired rate, not on its own"
                )
                out.append(
                    _finding(j, ev, "degeneration_in_kind", Severity.INFO, msg, streamed=streamed)
                )
            else:
                msg = f"degenerate output: {why}"
                out.append(
                    _finding(j, ev, "degeneration", Severity.CRITICAL, msg, streamed=streamed)
                )
        elif b.text.strip() and not c.text.strip() and not c.tool_calls:
            msg = "empty output where the baseline answered with text"
            out.append(_finding(j, ev, "empty_output", Severity.CRITICAL, msg, streamed=streamed))
    return out


def _status_findings(j: Judged, ev: GoldenEvidence, degenerate_already: bool) -> list[Finding]:
    obs = j.obs
    failed = obs.candidate_outcome.failures
    if degenerate_already:  # do not count the same symptom twice
        failed = tuple(f for f in failed if not f.startswith("no-degeneration"))
    text = "; ".join(failed)[:300]
    if j.status is ProbeStatus.REGRESSED and failed:
        severity = Severity.CRITICAL if obs.probe.category == "canary" else Severity.MAJOR
        return [_finding(j, ev, obs.probe.category, severity, f"regressed: {text}")]
    if j.status in (ProbeStatus.WITHIN_NOISE, ProbeStatus.EXPLAINED):
        msg = f"changed, {j.status}: {j.why} ({text})"
        return [_finding(j, ev, "drift_explained", Severity.INFO, msg)]
    if (
        j.status is ProbeStatus.PASS
        and obs.baseline.ok
        and not same_answer(obs.baseline, obs.candidate)
    ):
        return [_finding(j, ev, "changed", Severity.INFO, "output differs from the baseline")]
    return []


def _stream_findings(j: Judged, ev: GoldenEvidence) -> list[Finding]:
    """The candidate's streamed answer failing where the baseline's stream passes (and its own
    plain answer passes, so this is the stream path), unless the probe is unstable."""
    obs = j.obs
    outcomes = obs.stream_outcomes
    if outcomes is None or obs.unstable or not obs.candidate_outcome.passed:
        return []
    b_ok, c_ok = outcomes
    if b_ok and not c_ok:
        msg = "regressed when streamed: the non-streamed answer passes, the streamed one fails"
        return [_finding(j, ev, "stream_parity", Severity.MAJOR, msg, streamed=True)]
    return []


def _divergence(j: Judged) -> Divergence | None:
    if j.status not in (ProbeStatus.REGRESSED, ProbeStatus.EXPLAINED, ProbeStatus.WITHIN_NOISE):
        return None
    cmp = j.tokens if j.tokens is not None else j.obs.tokens()
    b, c = j.obs.baseline.logprobs or (), j.obs.candidate.logprobs or ()
    i = cmp.first_divergence if cmp is not None else None
    explanation = {
        ProbeStatus.REGRESSED: "regressed beyond noise",
        ProbeStatus.EXPLAINED: "near-tie",
        ProbeStatus.WITHIN_NOISE: "unstable on the baseline",
    }[j.status]
    return Divergence(
        gate=NAME,
        probe=j.obs.probe.id,
        token_index=i,
        baseline_token=b[i].token if i is not None and i < len(b) else None,
        candidate_token=c[i].token if i is not None and i < len(c) else None,
        margin_nats=cmp.margin_nats if cmp else None,
        gap_nats=cmp.gap_nats if cmp else None,
        candidate_in_baseline_top_k=cmp.b_token_in_top if cmp else None,
        baseline_in_candidate_top_k=cmp.a_token_in_top if cmp else None,
        explanation=explanation,
        blocking=j.status is ProbeStatus.REGRESSED,
        note=j.why,
    )


def _canary_check(judged: Sequence[Judged], policy: Policy) -> tuple[Check, list[Finding], int]:
    """Canaries the baseline passes and answers the same along its own paths must pass."""
    canaries = [j for j in judged if j.obs.probe.category == "canary"]
    usable = [j for j in canaries if j.status in (ProbeStatus.PASS, ProbeStatus.REGRESSED)]
    unusable = [
        j for j in canaries if j.status in (ProbeStatus.WITHIN_NOISE, ProbeStatus.EXPLAINED)
    ]
    rate = sum(j.status is ProbeStatus.PASS for j in usable) / len(usable) if usable else None
    row = ROWS["canary"]
    if rate is None:
        why = (
            "no canary usable for this model: the baseline fails them or their answers "
            "hinge on its own noise"
        )
        result = not_measured("canaries", "canaries held", why, row=row)
    else:
        result = check(
            "canaries",
            "canaries held",
            failed=rate < policy.canary_pass_rate,
            candidate=f"{rate:.0%} of {len(usable)} usable",
            baseline=f"{len(canaries)} canaries",
            limit=f"≥ {policy.canary_pass_rate:.0%}",
            policy_key="canary_pass_rate",
            row=row,
            reason=f"{rate:.0%} of usable canaries held" if rate < policy.canary_pass_rate else "",
        )
    notes = [
        Finding(
            probe=j.obs.probe.id,
            category="canary_unusable",
            severity=Severity.MINOR,
            message=f"canary unusable for this model: {j.why}",
            baseline_excerpt=describe(j.obs.baseline),
            candidate_excerpt=describe(j.obs.candidate),
        )
        for j in unusable
    ]
    return result, notes, len(unusable)


def _stream_check(judged: Sequence[Judged], policy: Policy, model: str | None) -> Check:
    pairs = [m for j in judged if (m := j.obs.stream_mismatch) is not None]
    if not pairs:
        return not_measured(
            "stream_mismatch",
            "streamed vs non-streamed answers",
            "no probe answered both ways on both sides",
        )
    base = sum(b for b, _ in pairs) / len(pairs)
    cand = sum(c for _, c in pairs) / len(pairs)
    tol = policy.tolerance_for(model).stream_mismatch_rate
    limit = noise_limit(base, policy.noise_k, tol)
    return at_most(
        "stream_mismatch",
        "streamed answers that differ from the non-streamed ones",
        cand,
        limit,
        unit="of probes",
        fmt=".0%",
        baseline=f"{base:.0%} of {len(pairs)} probes",
        policy_key="noise_k, tolerance.stream_mismatch_rate",
    )


def evaluate(ev: GoldenEvidence, policy: Policy, *, strict: bool = False) -> GateResult:
    """Judge every probe relative to the baseline and its noise; degeneration and hangs block."""
    judged, tie = _judged(ev, policy)
    kinds = baseline_kinds(ev)
    findings = _probe_findings(judged, ev, kinds)
    canary, unusable_notes, unusable = _canary_check(judged, policy)
    findings += unusable_notes
    stream = _stream_check(judged, policy, ev.model)
    if stream.outcome == "fail":
        findings += _stream_parity_findings(judged, ev)
    cats = category_rates(judged)
    checks = [
        _regressions_check(judged, findings, ev.concurrency),
        canary,
        _structured_check(cats.get("structured")),
        _degeneration_check(ev, findings, policy),
        _degeneration_rate(ev, kinds, policy),
        stream,
        _hangs_check(ev, findings, policy),
        *_unjudged_checks(judged, unusable_notes, unusable),
    ]
    divergences = [d for j in judged if (d := _divergence(j)) is not None]
    return gate_result(
        NAME,
        checks,
        strict=strict,
        findings=findings,
        divergences=divergences,
        metrics=_metrics(ev, judged, tie),
        details={
            "categories": cats,
            "probes": [_probe_detail(j) for j in judged],
            "probes_at_once": ev.concurrency,
            "batching": [b.as_dict() for b in ev.batching],
        },
    )


def _judged(ev: GoldenEvidence, policy: Policy) -> tuple[list[Judged], float]:
    """Every probe judged, and the near-tie limit they were judged with (from the baseline's
    own flips)."""
    flips = [c for c in self_flips(ev.observations) if c.gap_nats is not None]
    tie = near_tie_limit(
        policy.near_tie_margin_nats,
        (c.gap_nats or 0.0 for c in flips),
        policy.near_tie_margin_max_nats,
    )
    return [judge(o, tie) for o in ev.observations], tie


def _probe_findings(
    judged: Sequence[Judged], ev: GoldenEvidence, kinds: Counter[str]
) -> list[Finding]:
    """Each probe's findings: its content (the notes, then what blocks), its status, its stream."""
    findings: list[Finding] = []
    for j in judged:
        seen = _content_findings(j, ev, kinds)
        content = [f for f in seen if f.blocking]
        findings += [f for f in seen if not f.blocking]
        findings += content + _status_findings(j, ev, bool(content))
        findings += _stream_findings(j, ev)
    return findings


def _stream_parity_findings(judged: Sequence[Judged], ev: GoldenEvidence) -> list[Finding]:
    """The probes whose streamed answer differs from the non-streamed one where the baseline's
    does not (the stream check failed)."""
    return [
        _finding(
            j,
            ev,
            "stream_parity",
            Severity.MAJOR,
            "the streamed answer differs from the non-streamed one; the baseline's does not",
            streamed=True,
        )
        for j in judged
        if j.obs.stream_mismatch == (False, True) and not j.obs.unstable
    ]


def _regressions_check(
    judged: Sequence[Judged], findings: Sequence[Finding], at_once: int = 1
) -> Check:
    """No probe regressed beyond noise, and no other blocking finding (degeneration and hangs
    have checks of their own). Its power: the probes whose baseline answer changed along its
    own paths, where a candidate failure reads within noise, are counted beside it."""
    blocking = [f for f in findings if f.blocking]
    regressed = [j for j in judged if j.status is ProbeStatus.REGRESSED]
    # A regression needs a baseline that passes and a candidate that answered.
    scored = [j for j in judged if j.status in _COMPARED]
    other = [f for f in blocking if f.category not in ("degeneration", "empty_output", "timeout")]
    return check(
        "regressions",
        "probes regressed beyond noise",
        failed=True if regressed or other else (False if scored else None),
        candidate=f"{len(regressed)} of {len(scored)} judged",
        limit="0",
        core=True,
        reason="; ".join(f"{f.probe}: {f.message}" for f in other[:3])[:400],
        baseline=f"{sum(j.status is ProbeStatus.PASS for j in judged)} pass; "
        + _power(judged, at_once),
    )


def _power(judged: Sequence[Judged], at_once: int) -> str:
    """How many probes could show a regression: those whose baseline answer held along its own
    paths (a candidate failure on an unstable one reads within noise)."""
    unstable = sum(bool(j.obs.unstable) for j in judged)
    sent = "one probe at a time" if at_once == 1 else f"{at_once} probes at once"
    held = sum(j.obs.hit_not_sent for j in judged)
    if held:  # baseline_paths: when-needed, and no probe needed it (probe.needs_noise)
        sent += (
            f"; its cache-hit path not sent to {held}: no candidate answer could be judged "
            "differently with it"
        )
    return f"{unstable} of {len(judged)} unstable on the baseline's own paths ({sent})"


def _degeneration_check(ev: GoldenEvidence, findings: Sequence[Finding], policy: Policy) -> Check:
    """Severe degeneration (and empty answers) of a kind the baseline never shows, counted from
    the findings; not measured when no probe was answered on both sides."""
    degenerate_n = sum(1 for f in findings if f.category in ("degeneration", "empty_output"))
    answered = [o for o in ev.observations if o.baseline.ok and o.candidate.ok]
    return check(
        "degeneration",
        "severe degeneration of a kind the baseline never shows",
        failed=degenerate_n > policy.severe_degeneration_max if answered else None,
        candidate=f"{degenerate_n} answer(s)",
        policy_key="severe_degeneration_max",
        limit=f"≤ {policy.severe_degeneration_max}",
        row=ROWS["degeneration"],
        baseline=f"{_severe(ev, 'baseline')} answer(s)",
    )


def _hangs_check(ev: GoldenEvidence, findings: Sequence[Finding], policy: Policy) -> Check:
    """The candidate's requests that hung within `hangs_max`; not measured when nothing was
    sent to it."""
    hangs = sum(1 for f in findings if f.category == "timeout")
    attempted = [
        r
        for o in ev.observations
        for r in (o.candidate, o.candidate_stream)
        if not (r.error is not None and r.error.category == "not_sent")
    ]
    return check(
        "hangs",
        "requests that hung",
        failed=hangs > policy.hangs_max if attempted else None,
        candidate=str(hangs),
        limit=f"≤ {policy.hangs_max}",
        policy_key="hangs_max",
        row=ROWS["hangs"],
        reason="" if attempted else "nothing was sent to the candidate (it hung earlier)",
    )


def _unjudged_checks(
    judged: Sequence[Judged], unusable_notes: Sequence[Finding], unusable: int
) -> list[Check]:
    """Not measured: the probes that could not be judged, and the canaries unusable for this
    model."""
    checks = []
    inconclusive = [j for j in judged if j.status is ProbeStatus.INCONCLUSIVE]
    if inconclusive:
        why = "; ".join(f"{j.obs.probe.id}: {j.why}" for j in inconclusive)[:500]
        checks.append(not_measured("unjudged_probes", "probes that could not be judged", why))
    if unusable:
        names = ", ".join(f.probe for f in unusable_notes)
        checks.append(
            not_measured(
                "unusable_canaries",
                "canaries unusable for this model",
                f"their answers change with the baseline's own noise or hinge on a near-tie: "
                f"{names}",
            )
        )
    return checks


def _probe_detail(j: Judged) -> dict[str, str]:
    """One probe's line in the report's details: its id, category, status and why."""
    return {
        "probe": j.obs.probe.id,
        "category": j.obs.probe.category,
        "status": str(j.status),
        "why": j.why,
    }


def _severe(ev: GoldenEvidence, side: str) -> int:
    return sum(
        1
        for o in ev.observations
        if is_severe(degeneration_metrics((o.baseline if side == "baseline" else o.candidate).text))
    )


def _degeneration_rate(ev: GoldenEvidence, kinds: Counter[str], policy: Policy) -> Check:
    """Degeneration of the kinds the baseline shows itself, as a paired rate: probes where only
    the candidate degenerates against probes where only the baseline does, beyond the baseline's
    own path noise (probes whose baseline degenerates on one path and not another)."""
    title = "degeneration of kinds the baseline shows too, paired"
    row = None
    if not kinds:
        why = "the baseline shows no severe degeneration: any the candidate shows blocks alone"
        return not_applicable("degeneration_rate", title, why, row=row)

    def bad(c: Completion) -> bool:
        found = severe_kind(degeneration_metrics(c.text)) if c.ok else None
        return found is not None and found[0] in kinds

    pairs = [o for o in ev.observations if o.baseline.ok and o.candidate.ok]
    if not pairs:
        return not_measured("degeneration_rate", title, "no probe answered on both sides")
    counts = PairedCounts.from_outcomes(
        [not bad(o.baseline) for o in pairs], [not bad(o.candidate) for o in pairs]
    )
    flips = sum(
        1 for o in pairs if len({bad(o.baseline), bad(o.baseline_stream), bad(o.baseline_hit)}) > 1
    )
    excess = counts.regressions - counts.improvements
    allowed = noise_limit(flips, policy.noise_k, policy.severe_degeneration_max)
    p = mcnemar_exact(counts).p_candidate_worse
    failed = excess > allowed and p < policy.significance_alpha
    return check(
        "degeneration_rate",
        title,
        failed=failed,
        candidate=f"{counts.regressions} probe(s) only the candidate degenerates on "
        f"(McNemar p={p:.3g})",
        baseline=f"{counts.improvements} only the baseline; {flips} on one of its own paths only",
        limit=f"fails when the excess > {allowed:g} ({policy.noise_k:g} × path noise {flips} + "
        f"{policy.severe_degeneration_max}) and p < {policy.significance_alpha:g}",
        policy_key="noise_k, severe_degeneration_max, significance_alpha",
        reason=f"the candidate degenerates on {excess} more probe(s) than the baseline"
        if failed
        else "",
    )


def _structured_check(rates: Mapping[str, Any] | None) -> Check:
    title, row = "structured output (JSON, tool calls) regressions", ROWS["structured"]
    if not rates or not rates.get("n"):
        return not_measured("structured", title, "no JSON or tool-call probe judged", row=row)
    n = int(rates["regressions_beyond_noise"] or 0)
    noise = int(rates["failed_within_noise"] or 0)
    within = f"; {noise} failed within the baseline's noise" if noise else ""
    return check(
        "structured",
        title,
        failed=n > 0,
        row=row,
        limit="not lower than baseline beyond its noise",
        baseline=f"{rates['baseline_rate']:.0%} {rates['baseline_ci']}",
        candidate=f"{rates['candidate_rate']:.0%} {rates['candidate_ci']} "
        f"(McNemar p={rates['mcnemar_p_candidate_worse']}{within})",
        reason=f"{n} structured probe(s) regressed beyond noise" if n else "",
    )


def _metrics(ev: GoldenEvidence, judged: Sequence[Judged], tie: float) -> dict[str, MetricValue]:
    count = {s: sum(1 for j in judged if j.status is s) for s in ProbeStatus}
    obs = ev.observations
    both_ok = [o for o in obs if o.baseline.ok and o.candidate.ok]
    same = sum(1 for o in both_ok if same_answer(o.baseline, o.candidate))
    deg_c = [degeneration_metrics(o.candidate.text) for o in obs]
    mismatches = [m for o in obs if (m := o.stream_mismatch) is not None]
    return {
        "probes": len(obs),
        **{str(s).replace("-", "_"): count[s] for s in ProbeStatus},
        "changed": len(both_ok) - same,
        "unstable_on_baseline": sum(1 for o in obs if o.unstable),
        "cache_hits_not_sent": sum(1 for o in obs if o.hit_not_sent),
        "exact_match_rate": round(same / len(both_ok), 4) if both_ok else None,
        "near_tie_limit_nats": tie,
        "logprobs_requested": ev.logprobs,
        "baseline_errors": sum(1 for o in obs if not o.baseline.ok),
        "candidate_errors": sum(1 for o in obs if not o.candidate.ok),
        "stream_mismatch_baseline": sum(b for b, _ in mismatches),
        "stream_mismatch_candidate": sum(c for _, c in mismatches),
        "baseline_severe_degeneration": _severe(ev, "baseline"),
        "candidate_severe_degeneration": _severe(ev, "candidate"),
        "candidate_longest_char_run": max((m.longest_char_run for m in deg_c), default=0),
        "candidate_max_abnormal_char_ratio": round(
            max((m.abnormal_char_ratio for m in deg_c), default=0.0), 4
        ),
        "candidate_empty_outputs": sum(1 for m in deg_c if m.empty),
    }
