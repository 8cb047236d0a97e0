"""How the numerics gate judges: flips, prefix drift, perplexity, cross-NLL, NaN/Inf.

Every divergence is explained (numerics.py says what is measured and why).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from servegate.config.models import Policy
from servegate.endpoints.types import Completion, TokenLogprob
from servegate.gates.evidence import curl, describe, excerpt
from servegate.gates.numerics.echo_route import ScoringRoute, choose
from servegate.gates.numerics.noise import NAME
from servegate.gates.numerics.perplexity import ECHO_TOP_K, perplexity_shift
from servegate.gates.numerics.plan import (
    ROW_DRIFT,
    ROW_HANGS,
    ROW_PERPLEXITY,
    NumericsEvidence,
    PromptObservation,
)
from servegate.gates.numerics.prompt import prompt_check
from servegate.gates.pair import timed_out
from servegate.gates.tokens import TokenComparison, compare, non_finite, token_pair
from servegate.stats.divergence import near_tie_limit, noise_limit
from servegate.verdict.judgement import (
    at_most,
    check,
    gate_result,
    not_applicable,
    not_measured,
)
from servegate.verdict.model import Check, Divergence, Finding, GateResult, MetricValue, Severity


def _at(tokens: Sequence[TokenLogprob], div: int) -> str:
    """The end of the common prefix, then ⟦what this side said from the divergence on⟧."""
    head = "".join(t.token for t in tokens[:div])[-60:]
    return excerpt(f"…{head}⟦{''.join(t.token for t in tokens[div:])[:80]}⟧")


def _finding(
    o: PromptObservation, ev: NumericsEvidence, category: str, message: str, **kw: Any
) -> Finding:
    side = kw.pop("side", "candidate")
    url = ev.candidate_url if side == "candidate" else ev.baseline_url
    kw.setdefault("baseline_excerpt", describe(o.baseline))
    kw.setdefault("candidate_excerpt", describe(o.candidate))
    body = {**o.request.body, **({"model": ev.model} if ev.model else {})}
    return Finding(
        probe=o.request.probe,
        category=category,
        severity=kw.pop("severity", Severity.MAJOR),
        side=side,
        message=message,
        curl=curl(url, o.request.api, body),
        **kw,
    )


@dataclass
class _Probes:
    """Each observation sorted into what can be compared and what cannot, with findings."""

    compared: list[tuple[PromptObservation, TokenComparison]]
    findings: list[Finding]
    unjudged: list[str]  # "probe: why" of probes with no comparison
    hangs: int


def _sort(ev: NumericsEvidence) -> _Probes:
    out = _Probes([], [], [], 0)
    for o in ev.observations:
        bad = [
            side
            for side, c in (("baseline", o.baseline), ("candidate", o.candidate))
            if non_finite(c)
        ]
        if "candidate" in bad:
            msg = "the candidate returned NaN or infinite logprobs"
            out.findings.append(_finding(o, ev, "non_finite", msg, severity=Severity.CRITICAL))
        if bad:
            out.unjudged.append(f"{o.request.probe}: NaN/Inf logprobs on the {bad[0]}")
            continue
        if not o.baseline.ok:
            out.unjudged.append(f"{o.request.probe}: baseline {describe(o.baseline)}")
            continue
        if timed_out(o.candidate):
            out.hangs += 1
            out.findings.append(
                _finding(
                    o,
                    ev,
                    "timeout",
                    "the candidate did not answer within "
                    "its deadline, scaled to the baseline's latency, twice",
                    severity=Severity.CRITICAL,
                )
            )
            continue
        if not o.candidate.ok:
            out.unjudged.append(f"{o.request.probe}: candidate {describe(o.candidate)}")
            if o.candidate.error is not None and o.candidate.error.category != "not_sent":
                out.findings.append(
                    _finding(o, ev, "request_error", "the candidate failed; the baseline answered")
                )
            continue
        tokens = token_pair(o.baseline, o.candidate)
        if tokens is None:
            out.unjudged.append(f"{o.request.probe}: a side returned no token logprobs")
            continue
        out.compared.append((o, compare(o.request.probe, *tokens)))
    return out


def _not_sent(c: Completion) -> bool:
    return c.error is not None and c.error.category == "not_sent"


def _divergence(
    o: PromptObservation, cmp: TokenComparison, tie: float, routes: Routes
) -> Divergence:
    i = cmp.first_divergence or 0
    b, c = o.baseline.logprobs or (), o.candidate.logprobs or ()
    if cmp.early_stop:
        shorter = "candidate" if cmp.tokens_b < cmp.tokens_a else "baseline"
        why, blocking = f"one side stopped: the {shorter} ended at token {i}", False
    elif (cmp.gap_nats or 0.0) > tie:
        why, blocking = "confident", True
    else:
        why, blocking = "near-tie", False
    note = ""
    cross = o.cross.scores(routes["baseline"], routes["candidate"]) if o.cross else None
    if cross is not None and (x := cross.excess_nats) is not None:
        least = "at least " if cross.excess_is_bound else ""
        note = f"the baseline finds the candidate's text {least}{x:+.2f} nats/token less likely"
    return Divergence(
        gate=NAME,
        probe=o.request.probe,
        token_index=i,
        baseline_token=b[i].token if i < len(b) else None,
        candidate_token=c[i].token if i < len(c) else None,
        margin_nats=cmp.margin_nats,
        gap_nats=cmp.gap_nats,
        candidate_in_baseline_top_k=cmp.b_token_in_top,
        baseline_in_candidate_top_k=cmp.a_token_in_top,
        explanation=why,
        blocking=blocking,
        note=note,
    )


def _flip_finding(o: PromptObservation, d: Divergence, tie: float, ev: NumericsEvidence) -> Finding:
    b, c = o.baseline.logprobs or (), o.candidate.logprobs or ()
    i = d.token_index or 0
    where = "inside" if d.candidate_in_baseline_top_k else "outside"
    return _finding(
        o,
        ev,
        "numerics",
        f"confident disagreement at token {i}: the candidate chose {d.candidate_token!r} ({where}"
        f" the baseline's top-k), {d.gap_nats:.2f} nats below the baseline's "
        f"{d.baseline_token!r} (near-tie limit {tie:.2f}; baseline top-1 − top-2 margin "
        f"{d.margin_nats if d.margin_nats is None else round(d.margin_nats, 2)} nats)",
        baseline_excerpt=_at(b, i),
        candidate_excerpt=_at(c, i),
    )


def floor_not_needed(
    observations: Sequence[PromptObservation], policy: Policy, model: str | None
) -> str | None:
    """Why the baseline's noise floor cannot change this verdict, or None when it can.

    The floor feeds two checks, and only ever widens their limits: the near-tie limit (never
    below `near_tie_margin_nats`) and the |Δlogprob| limit (`noise_k` × floor + tolerance,
    never below the tolerance). When every probe compared token for token with no flip, and
    the mean |Δlogprob| is within the tolerance alone, both pass at the narrowest limits, so
    they pass at any floor. Anything else — a flip, more drift, a probe not compared — needs
    the floor."""
    tolerance = policy.tolerance_for(model).dlogprob_nats
    drifts: list[float | None] = []
    for o in observations:
        tokens = token_pair(o.baseline, o.candidate)
        if non_finite(o.baseline) or non_finite(o.candidate) or tokens is None:
            return None
        cmp = compare(o.request.probe, *tokens)
        if not cmp.exact:
            return None
        drifts.append(cmp.mean_abs_dlogprob)
    drift = _mean(drifts)
    if not observations or drift is None or drift > tolerance:
        return None
    return (
        f"not needed: all {len(observations)} probes answered token for token as the baseline, "
        f"mean |Δlogprob| {drift:.4f} ≤ the tolerance alone ({tolerance:g} nats), so no floor "
        "could change a check it feeds (baseline_paths: always measures it)"
    )


def _mean(values: Sequence[float | None]) -> float | None:
    got = [v for v in values if v is not None]
    return sum(got) / len(got) if got else None


def _fmt(value: float | None, spec: str = ".4f") -> str:
    return "-" if value is None else format(value, spec)


def _magnitude_checks(
    ev: NumericsEvidence, probes: _Probes, policy: Policy, tie: float, routes: Routes
) -> tuple[list[Check], list[Divergence]]:
    tol = policy.tolerance_for(ev.model)
    floor = ev.noise
    pairs = probes.compared
    divs = [_divergence(o, c, tie, routes) for o, c in pairs if not c.exact]
    required = policy.numerics.require
    confident = [d for d in divs if d.blocking]
    why_none = "no probe returned comparable token logprobs on both sides"
    flips = at_most(
        "confident_flips",
        "confident disagreements at the first divergence",
        len(confident) / len(pairs) if pairs else None,
        tol.confident_flip_rate,
        unit="of probes",
        fmt=".0%",
        policy_key="tolerance.confident_flip_rate",
        baseline=f"near-tie limit {tie:.2f} nats",
        core="token_comparison" in required,
        why_missing=why_none,
        limit_text=f"≤ {tol.confident_flip_rate:.0%} (flips above {tie:.2f} nats; "
        f"{len(divs) - len(confident)} near-tie or early-stop flip(s) are within noise)",
    )
    floor_dlp = floor.mean_abs_dlogprob() or 0.0
    dlp_limit = noise_limit(floor_dlp, policy.noise_k, tol.dlogprob_nats)
    drift = at_most(
        "prefix_dlogprob",
        "mean |Δlogprob| on the common prefix",
        _mean([c.mean_abs_dlogprob for _, c in pairs]),
        dlp_limit,
        unit="nats",
        policy_key="noise_k, tolerance.dlogprob_nats",
        core="prefix_dlogprob" in required,
        row=ROW_DRIFT,
        baseline=f"floor {floor.not_needed}"
        if floor.not_needed
        else f"floor {floor_dlp:.4f} nats ({floor.source})",
        limit_text=f"≤ {dlp_limit:.4f} nats ({policy.noise_k:g} × floor {floor_dlp:.4f} + "
        f"tolerance {tol.dlogprob_nats:g})",
        why_missing=why_none,
    )
    early = [d for d in divs if d.explanation.startswith("one side stopped")]
    checks = [flips, drift]
    if early:
        names = ", ".join(d.probe for d in early)
        checks.append(
            not_measured(
                "early_stops",
                "divergences where one side stopped early",
                f"no token to compare at the divergence ({names})",
            )
        )
    if probes.unjudged:
        checks.append(
            not_measured(
                "unjudged_probes",
                "probes that could not be compared",
                "; ".join(probes.unjudged)[:500],
            )
        )
    return checks, divs


Routes = dict[str, ScoringRoute]


def routes_of(ev: NumericsEvidence, policy: Policy) -> Routes:
    """Each side's prompt-scoring route, chosen from its measured echo alignment: the one place
    that decides whether (and how) a side's echo logprobs may be read."""
    limit = policy.echo_alignment_max_nats
    return {side: choose(ev.echo.get(side), limit) for side in ("baseline", "candidate")}


def _unusable(routes: Routes, title: str, name: str, core: bool, row: str | None) -> Check | None:
    """Not applicable when a side offers no echo logprobs at all; not measured when a side
    offers them but they failed their check; None when both routes can be read."""
    absent = [f"the {side} {r.reason}" for side, r in routes.items() if not r.offered]
    if absent:
        return not_applicable(name, title, "; ".join(absent), row=row)
    off = [f"{side}: {r.reason}" for side, r in routes.items() if not r.usable]
    if off:
        why = "echo logprobs cannot be trusted: " + "; ".join(off)
        return not_measured(name, title, why, core=core, row=row)
    return None


def _route_info(routes: Routes) -> dict[str, Any]:
    return {
        f"{side}_route": {
            "route": r.name,
            "shift": r.shift,
            "as_returned_nats": r.as_returned_nats,
            "calibrated_nats": r.calibrated_nats,
            "described": r.describe(),
        }
        for side, r in routes.items()
    }


def _perplexity_check(
    ev: NumericsEvidence, policy: Policy, routes: Routes
) -> tuple[Check, dict[str, Any]]:
    title = "perplexity shift on the reference texts"
    core = "perplexity_shift" in policy.numerics.require
    info: dict[str, Any] = _route_info(routes)
    gap = _unusable(routes, title, "perplexity_shift", core, ROW_PERPLEXITY)
    if gap is not None:
        return gap, info
    result = perplexity_shift(ev.texts, routes["baseline"], routes["candidate"])
    info |= {
        "scoring_budget_note": ev.scoring_note or None,
        "texts_compared": list(result.texts_compared),
        "texts_unscored": list(result.texts_unscored),
        "texts_tokenized_differently": list(result.texts_tokenized_differently),
        "tokens": result.shift.n,
        "tokens_total": result.tokens_total,
        "coverage": result.coverage,
        "baseline_mean_nll_nats": result.baseline_nll,
        "shift_nats": result.shift.mean if result.shift.n else None,
        "argmax_flip_rate": result.argmax_flip_rate,
        "mean_abs_dlogprob_nats": result.mean_abs_dlogprob,
        "stderr_nats": result.shift.stderr,
        "z": result.shift.z,
        "by_position": [
            {"positions": label, "tokens": n, "shift_nats": mean}
            for label, n, mean in result.by_position
        ],
    }
    s = result.shift
    if s.z is None:
        why = "no reference text was scored on both sides with the same tokens"
        return not_measured("perplexity_shift", title, why, core=core, row=ROW_PERPLEXITY), info
    tol = policy.tolerance_for(ev.model)
    z = s.z
    failed = z > policy.perplexity_z_max and s.mean > tol.perplexity_shift_nats
    cover = ""
    if result.coverage is not None and result.coverage < 1.0:
        cover = f", {result.coverage:.0%} of {result.tokens_total} positions scored on both sides"
    budget = f"; {ev.scoring_note}" if ev.scoring_note else ""
    shown = f"{s.mean:+.4f} ± {s.stderr:.4f} nats/token (z {z:+.1f}, {s.n} tokens{cover}{budget})"
    routes_text = "; ".join(f"{side}: {r.describe()}" for side, r in routes.items())
    return check(
        "perplexity_shift",
        title,
        failed=failed,
        candidate=shown,
        baseline=f"NLL {_fmt(result.baseline_nll, '.3f')} nats/token ({routes_text})",
        limit=f"fails when > {tol.perplexity_shift_nats:g} nats/token and z > "
        f"{policy.perplexity_z_max:g}",
        policy_key="tolerance.perplexity_shift_nats, perplexity_z_max",
        core=core,
        row=ROW_PERPLEXITY,
        reason=f"the candidate is systematically worse: {shown}" if failed else "",
    ), info


def _cross_check(
    ev: NumericsEvidence, policy: Policy, routes: Routes
) -> tuple[Check, list[Finding], dict[str, MetricValue]]:
    title = "cross-scored NLL excess of divergent answers"
    # Only the baseline's route matters to the excess (the baseline scores both texts); the
    # candidate's route only to the teacher-forced ΔNLL beside it.
    crossed = [
        (o, o.cross.scores(routes["baseline"], routes["candidate"]))
        for o in ev.observations
        if o.cross is not None
    ]
    excess = [(o, x, cs.excess_is_bound) for o, cs in crossed if (x := cs.excess_nats) is not None]
    tf = [x for _, cs in crossed if (x := cs.teacher_forced_dnll_nats) is not None]
    limit = policy.cross_nll_excess_nats
    exact = [(o, x) for o, x, bound in excess if not bound]
    proven = [(o, x, bound) for o, x, bound in excess if x > limit]
    unproven = [o.request.probe for o, x, bound in excess if bound and x <= limit]
    metrics: dict[str, MetricValue] = {
        "cross_nll_excess_max_nats": max((x for _, x in exact), default=None),
        "cross_nll_excess_mean_nats": _mean([x for _, x in exact]),
        "teacher_forced_dnll_nats": _mean(tf),
    }
    findings = [
        _finding(
            o,
            ev,
            "numerics",
            f"the baseline finds the candidate's text {'at least ' if bound else ''}{x:.2f} "
            f"nats/token less likely than its own (limit {limit})",
        )
        for o, x, bound in proven
    ]
    diverged = [
        o.request.probe
        for o in ev.observations
        if o.baseline.ok and o.candidate.ok and o.baseline.text != o.candidate.text
    ]
    base_route = {"baseline": routes["baseline"]}
    gap = _unusable(base_route, title, "cross_nll_excess", False, None)
    if gap is not None and (diverged or crossed):
        reason = gap.reason
        if diverged:
            names = ", ".join(diverged)
            reason = f"{len(diverged)} greedy answer(s) differ in text ({names}), but {reason}"
        return gap.model_copy(update={"reason": reason}), findings, metrics
    if proven:
        worst = max(x for _, x, _ in proven)
        return (
            check(
                "cross_nll_excess",
                title,
                failed=True,
                candidate=f"{'≥ ' if any(b for *_, b in proven) else ''}{worst:.4g} nats/token",
                limit=f"≤ {limit:.4g} nats/token",
                policy_key="cross_nll_excess_nats",
                reason=f"{worst:.4g} nats/token exceeds ≤ {limit:.4g} nats/token",
            ),
            findings,
            metrics,
        )
    if unproven:
        why = (
            f"divergent answers of {', '.join(unproven)} have tokens outside the baseline's "
            f"shifted top-{ECHO_TOP_K}: their excess is only known to be at least a lower bound"
        )
        return not_measured("cross_nll_excess", title, why), findings, metrics
    why = (
        "no greedy answer diverged: nothing to cross-score"
        if not crossed and not diverged
        else "echo scores missing for the divergent answers"
    )
    result = at_most(
        "cross_nll_excess",
        title,
        metrics["cross_nll_excess_max_nats"] if exact else None,  # type: ignore[arg-type]
        limit,
        unit="nats/token",
        policy_key="cross_nll_excess_nats",
        why_missing=why,
    )
    return result, findings, metrics


def evaluate(ev: NumericsEvidence, policy: Policy, *, strict: bool = False) -> GateResult:
    """Judge flips, prefix drift, perplexity, cross-NLL and NaN/Inf against the
    noise floor and the policy; explain every divergence."""
    probes = _sort(ev)
    tie = near_tie_limit(
        policy.near_tie_margin_nats, ev.noise.tie_gaps_nats(), policy.near_tie_margin_max_nats
    )
    routes = routes_of(ev, policy)
    checks, divergences = _magnitude_checks(ev, probes, policy, tie, routes)
    by_probe = {o.request.probe: o for o, _ in probes.compared}
    findings = probes.findings + [
        _flip_finding(by_probe[d.probe], d, tie, ev) for d in divergences if d.blocking
    ]
    ppl, ppl_info = _perplexity_check(ev, policy, routes)
    cross, cross_findings, cross_metrics = _cross_check(ev, policy, routes)
    findings += cross_findings
    prompt, prompt_findings = prompt_check(ev)
    findings += prompt_findings
    checks += [prompt, ppl, cross, *_candidate_checks(ev, probes, policy)]
    if not ev.noise.measured and not ev.noise.not_needed:
        why = "no path of the baseline gave comparable answers: limits use the tolerance alone"
        checks.append(not_measured("noise_floor", "the baseline's noise floor", why))
    metrics = {
        **_metrics(ev, probes, divergences, tie, routes),
        **cross_metrics,
        **ev.noise.metrics(),
        **_perplexity_metrics(ppl_info),
    }
    return gate_result(
        NAME,
        checks,
        strict=strict,
        findings=findings,
        divergences=divergences,
        metrics=metrics,
        details={"perplexity": ppl_info},
    )


def _candidate_checks(ev: NumericsEvidence, probes: _Probes, policy: Policy) -> list[Check]:
    """NaN/Inf logprobs, requests the candidate failed, and hangs; each not measured when
    nothing it needs reached the candidate."""
    # Zero requests sent to the candidate is not zero failures: each of these is not measured
    # then (a vacuous pass is no pass).
    sent = [o for o in ev.observations if not _not_sent(o.candidate)]
    idle = None if sent else "no probe was sent to the candidate"
    non_finite_fail = any(f.category == "non_finite" and f.blocking for f in probes.findings)
    with_logprobs = [o for o in sent if o.candidate.logprobs or non_finite(o.candidate)]
    errors = [f for f in probes.findings if f.category == "request_error"]
    return [
        check(
            "non_finite",
            "NaN or infinite logprobs on the candidate",
            failed=non_finite_fail if with_logprobs else None,
            candidate=f"{len(with_logprobs)} answer(s) with logprobs",
            reason="" if with_logprobs else "no candidate answer carried logprobs to check",
        ),
        check(
            "request_errors",
            "requests the candidate failed and the baseline answered",
            failed=bool(errors) if sent else None,
            candidate=str(len(errors)),
            limit="0",
            reason=idle or "",
        ),
        check(
            "hangs",
            "requests that hung",
            failed=probes.hangs > policy.hangs_max if sent else None,
            candidate=str(probes.hangs),
            limit=f"≤ {policy.hangs_max}",
            policy_key="hangs_max",
            row=ROW_HANGS,
            reason=idle or "",
        ),
    ]


def _metrics(
    ev: NumericsEvidence,
    probes: _Probes,
    divergences: Sequence[Divergence],
    tie: float,
    routes: Routes,
) -> dict[str, MetricValue]:
    """How the compared probes agreed, the flips by kind, and each side's scoring route."""
    pairs = probes.compared
    return {
        "probes": len(ev.observations),
        "probes_compared": len(pairs),
        "exact_match_rate": _mean([float(c.exact) for _, c in pairs]),
        "near_tie_flips": sum(1 for d in divergences if d.explanation == "near-tie"),
        "confident_flips": sum(1 for d in divergences if d.blocking),
        "early_stop_divergences": sum(1 for d in divergences if d.explanation.startswith("one")),
        "near_tie_limit_nats": tie,
        "mean_abs_dlogprob_nats": _mean([c.mean_abs_dlogprob for _, c in pairs]),
        "mean_topk_jaccard": _mean([c.topk_jaccard for _, c in pairs]),
        "baseline_echo_alignment_nats": routes["baseline"].as_returned_nats,
        "candidate_echo_alignment_nats": routes["candidate"].as_returned_nats,
        "baseline_scoring_route": routes["baseline"].name,
        "candidate_scoring_route": routes["candidate"].name,
        "baseline_echo_calibrated_nats": routes["baseline"].calibrated_nats,
        "candidate_echo_calibrated_nats": routes["candidate"].calibrated_nats,
    }


def _perplexity_metrics(info: Mapping[str, Any]) -> dict[str, MetricValue]:
    """The perplexity shift's numbers, when reference texts were scored."""
    if "tokens" not in info:
        return {}
    return {
        "perplexity_coverage": info["coverage"],
        "perplexity_tokens": info["tokens"],
        "baseline_reference_nll_nats": info["baseline_mean_nll_nats"],
        "perplexity_shift_nats": info["shift_nats"],
        "perplexity_shift_stderr_nats": info["stderr_nats"],
        "perplexity_shift_z": info["z"],
        "reference_argmax_flip_rate": info["argmax_flip_rate"],
        "reference_mean_abs_dlogprob_nats": info["mean_abs_dlogprob_nats"],
    }
