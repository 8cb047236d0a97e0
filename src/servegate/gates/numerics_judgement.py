"""How the numerics gate judges: flips, prefix drift, perplexity, cross-NLL, NaN/Inf.

Every divergence is explained (numerics.py says what is measured and why).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from servegate.config.models import Policy
from servegate.endpoints.types import TokenLogprob
from servegate.gates.evidence import curl, describe, excerpt
from servegate.gates.noise import NAME
from servegate.gates.numerics_plan import (
    ROW_DRIFT,
    ROW_HANGS,
    ROW_PERPLEXITY,
    NumericsEvidence,
    Observation,
)
from servegate.gates.pair import timed_out
from servegate.gates.perplexity import perplexity_shift
from servegate.gates.tokens import TokenComparison, compare, non_finite, token_pair
from servegate.stats.divergence import noise_limit
from servegate.verdict.judgement import at_most, check, gate_result, not_measured
from servegate.verdict.model import Check, Divergence, Finding, GateResult, MetricValue, Severity


def _at(tokens: Sequence[TokenLogprob], div: int) -> str:
    """The end of the common prefix, then ⟦what this side said from the divergence on⟧."""
    head = "".join(t.token for t in tokens[:div])[-60:]
    return excerpt(f"…{head}⟦{''.join(t.token for t in tokens[div:])[:80]}⟧")


def _finding(
    o: Observation, ev: NumericsEvidence, category: str, message: str, **kw: Any
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

    compared: list[tuple[Observation, TokenComparison]]
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


def _divergence(o: Observation, cmp: TokenComparison, tie: float) -> Divergence:
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
    if o.cross is not None and (x := o.cross.excess_nats) is not None:
        note = f"the baseline finds the candidate's text {x:+.2f} nats/token less likely"
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


def _flip_finding(o: Observation, d: Divergence, tie: float, ev: NumericsEvidence) -> Finding:
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


def _mean(values: Sequence[float | None]) -> float | None:
    got = [v for v in values if v is not None]
    return sum(got) / len(got) if got else None


def _fmt(value: float | None, spec: str = ".4f") -> str:
    return "-" if value is None else format(value, spec)


def _magnitude_checks(
    ev: NumericsEvidence, probes: _Probes, policy: Policy, tie: float
) -> tuple[list[Check], list[Divergence]]:
    tol = policy.tolerance_for(ev.model)
    floor = ev.noise
    pairs = probes.compared
    divs = [_divergence(o, c, tie) for o, c in pairs if not c.exact]
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
        core=True,
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
        core=True,
        row=ROW_DRIFT,
        baseline=f"floor {floor_dlp:.4f} nats ({floor.source})",
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


def _perplexity_check(ev: NumericsEvidence, policy: Policy) -> tuple[Check, dict[str, Any]]:
    title = "perplexity shift on the reference texts"
    off = []
    for side in ("baseline", "candidate"):
        error = ev.alignment_nats.get(side)
        if error is None:
            off.append(f"{side}: {ev.alignment_notes.get(side) or 'not checked'}")
        elif error > policy.echo_alignment_max_nats:
            off.append(
                f"{side}: echo logprobs {error:.3f} nats/token off its generation "
                f"logprobs (limit {policy.echo_alignment_max_nats}): not aligned"
            )
    if off:
        why = "echo logprobs cannot be trusted: " + "; ".join(off)
        return not_measured("perplexity_shift", title, why, core=True, row=ROW_PERPLEXITY), {}
    result = perplexity_shift(ev.texts)
    info: dict[str, Any] = {
        "texts_compared": list(result.texts_compared),
        "texts_unscored": list(result.texts_unscored),
        "texts_tokenized_differently": list(result.texts_tokenized_differently),
        "tokens": result.shift.n,
        "baseline_mean_nll_nats": result.baseline_nll,
        "shift_nats": result.shift.mean if result.shift.n else None,
        "argmax_flip_rate": result.argmax_flip_rate,
        "mean_abs_dlogprob_nats": result.mean_abs_dlogprob,
        "stderr_nats": result.shift.stderr,
        "z": result.shift.z,
    }
    s = result.shift
    if s.z is None:
        why = "no reference text was scored on both sides with the same tokens"
        return not_measured("perplexity_shift", title, why, core=True, row=ROW_PERPLEXITY), info
    tol = policy.tolerance_for(ev.model)
    z = s.z
    failed = z > policy.perplexity_z_max and s.mean > tol.perplexity_shift_nats
    shown = f"{s.mean:+.4f} ± {s.stderr:.4f} nats/token (z {z:+.1f}, {s.n} tokens)"
    return check(
        "perplexity_shift",
        title,
        failed=failed,
        candidate=shown,
        baseline=f"NLL {_fmt(result.baseline_nll, '.3f')} nats/token",
        limit=f"fails when > {tol.perplexity_shift_nats:g} nats/token and z > "
        f"{policy.perplexity_z_max:g}",
        policy_key="tolerance.perplexity_shift_nats, perplexity_z_max",
        core=True,
        row=ROW_PERPLEXITY,
        reason=f"the candidate is systematically worse: {shown}" if failed else "",
    ), info


def _cross_check(
    ev: NumericsEvidence, policy: Policy
) -> tuple[Check, list[Finding], dict[str, MetricValue]]:
    crossed = [(o, o.cross) for o in ev.observations if o.cross is not None]
    excess = [(o, x) for o, cs in crossed if (x := cs.excess_nats) is not None]
    tf = [x for _, cs in crossed if (x := cs.teacher_forced_dnll_nats) is not None]
    metrics: dict[str, MetricValue] = {
        "cross_nll_excess_max_nats": max((x for _, x in excess), default=None),
        "cross_nll_excess_mean_nats": _mean([x for _, x in excess]),
        "teacher_forced_dnll_nats": _mean(tf),
    }
    limit = policy.cross_nll_excess_nats
    findings = [
        _finding(
            o,
            ev,
            "numerics",
            f"the baseline finds the candidate's text {x:.2f} nats/token "
            f"less likely than its own (limit {limit})",
        )
        for o, x in excess
        if x > limit
    ]
    diverged = [
        o.request.probe
        for o in ev.observations
        if o.baseline.ok and o.candidate.ok and o.baseline.text != o.candidate.text
    ]
    why = (
        "no greedy answer diverged: nothing to cross-score"
        if not crossed and not diverged
        else "echo scores missing for the divergent answers"
    )
    if not crossed and ev.alignment_nats.get("baseline") is None:
        why = "the baseline returned no echo logprobs"
        if diverged:
            why = (
                f"{len(diverged)} greedy answer(s) differ in text ({', '.join(diverged)}), "
                f"but {why} to score them"
            )
    result = at_most(
        "cross_nll_excess",
        "cross-scored NLL excess of divergent answers",
        metrics["cross_nll_excess_max_nats"] if excess else None,  # type: ignore[arg-type]
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
    floor = ev.noise
    tie = max(policy.near_tie_margin_nats, floor.tie_gap_nats() or 0.0)
    checks, divergences = _magnitude_checks(ev, probes, policy, tie)
    by_probe = {o.request.probe: o for o, _ in probes.compared}
    findings = probes.findings + [
        _flip_finding(by_probe[d.probe], d, tie, ev) for d in divergences if d.blocking
    ]
    ppl, ppl_info = _perplexity_check(ev, policy)
    cross, cross_findings, cross_metrics = _cross_check(ev, policy)
    findings += cross_findings
    hangs = check(
        "hangs",
        "requests that hung",
        failed=probes.hangs > policy.hangs_max,
        candidate=str(probes.hangs),
        limit=f"≤ {policy.hangs_max}",
        policy_key="hangs_max",
        row=ROW_HANGS,
    )
    non_finite_fail = any(f.category == "non_finite" and f.blocking for f in probes.findings)
    errors = [f for f in probes.findings if f.category == "request_error"]
    checks += [
        ppl,
        cross,
        check("non_finite", "NaN or infinite logprobs on the candidate", failed=non_finite_fail),
        check(
            "request_errors",
            "requests the candidate failed and the baseline answered",
            failed=bool(errors),
            candidate=str(len(errors)),
            limit="0",
        ),
        hangs,
    ]
    if not floor.measured:
        why = "no path of the baseline gave comparable answers: limits use the tolerance alone"
        checks.append(not_measured("noise_floor", "the baseline's noise floor", why))
    pairs = probes.compared
    metrics: dict[str, MetricValue] = {
        "probes": len(ev.observations),
        "probes_compared": len(pairs),
        "exact_match_rate": _mean([float(c.exact) for _, c in pairs]),
        "near_tie_flips": sum(1 for d in divergences if d.explanation == "near-tie"),
        "confident_flips": sum(1 for d in divergences if d.blocking),
        "early_stop_divergences": sum(1 for d in divergences if d.explanation.startswith("one")),
        "near_tie_limit_nats": tie,
        "mean_abs_dlogprob_nats": _mean([c.mean_abs_dlogprob for _, c in pairs]),
        "mean_topk_jaccard": _mean([c.topk_jaccard for _, c in pairs]),
        "baseline_echo_alignment_nats": ev.alignment_nats.get("baseline"),
        "candidate_echo_alignment_nats": ev.alignment_nats.get("candidate"),
        **cross_metrics,
        **floor.metrics(),
    }
    if ppl_info:
        metrics["perplexity_tokens"] = ppl_info["tokens"]
        metrics["baseline_reference_nll_nats"] = ppl_info["baseline_mean_nll_nats"]
        metrics["perplexity_shift_nats"] = ppl_info["shift_nats"]
        metrics["perplexity_shift_stderr_nats"] = ppl_info["stderr_nats"]
        metrics["perplexity_shift_z"] = ppl_info["z"]
        metrics["reference_argmax_flip_rate"] = ppl_info["argmax_flip_rate"]
        metrics["reference_mean_abs_dlogprob_nats"] = ppl_info["mean_abs_dlogprob_nats"]
    return gate_result(
        NAME,
        checks,
        strict=strict,
        findings=findings,
        divergences=divergences,
        metrics=metrics,
        details={"perplexity": ppl_info},
    )
