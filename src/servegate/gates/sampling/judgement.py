"""How the sampling gate judges: each side against its own report, then the two sides' draws.

A self-consistency check (temperature 1, each other temperature, top_p, top_k, min_p) fails the
candidate when its test rejects where the baseline's passes. A baseline that fails is reported as
the baseline's defect and never blocks: the candidate passes that check when its own test passes,
and when both fail the check is not measured (no reference). A parameter the baseline refuses is
not applicable (listed); one the candidate refuses where the baseline samples with it fails.
Every passing check states its power: the smallest temperature error its test detects with
probability ≥ `sampling.power`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from servegate.config.models import Policy
from servegate.endpoints.types import Completion
from servegate.gates.evidence import curl
from servegate.gates.pair import timed_out
from servegate.gates.sampling import production
from servegate.gates.sampling.bias import bias_check
from servegate.gates.sampling.first_token import (
    FamilyResult,
    LogprobsMode,
    drawn,
    family,
    homogeneity_test,
    logprobs_mode,
    reference_test,
    refused,
    tempered_test,
    truncation_test,
)
from servegate.gates.sampling.plan import (
    NAME,
    TRUNCATIONS,
    CellDraws,
    Kind,
    Reported,
    SamplingEvidence,
)
from servegate.gates.sampling.sequences import choices_check, penalty_checks, seed_check
from servegate.stats.goodness_of_fit import (
    Detectable,
    detectable_temperature_error,
    narrower_power,
)
from servegate.verdict.judgement import check, gate_result, not_applicable, not_measured
from servegate.verdict.model import Check, Finding, GateResult, MetricValue, Severity

SIDES = ("baseline", "candidate")
Judged = tuple[Check, list[Finding]]
ROW = "sampled distribution"
EACH_DRAW = "each draw is the request below, sent again"
TITLES = {
    Kind.REFERENCE: "temperature 1 samples the reported distribution",
    Kind.TOP_P: "top_p keeps the nucleus of the reported distribution",
    Kind.TOP_K: "top_k keeps the k most likely reported tokens",
    Kind.MIN_P: "min_p keeps the tokens above its share of the most likely",
}


def _power_text(
    fam: FamilyResult, policy: Policy, *, narrower: bool = False
) -> tuple[str, Detectable | None]:
    """The power statement of a passing family. `narrower` (top_p, top_k, min_p): instead of a
    temperature error, a sampler drawing outside the kept set and one keeping a token fewer."""
    sp = policy.sampling
    cells = fam.power_cells()
    level = f"with probability ≥ {sp.power:g}"
    if narrower:
        share = 1 - (1 - sp.power) ** (1 / fam.draws) if fam.draws else None
        text = f"; draws outside the kept set at ≥ {share:.1%} show {level}" if share else ""
        if cells:
            p = narrower_power(cells, sp.alpha / len(cells), min_expected=sp.min_expected)
            text += f"; a kept set one token short is detected with probability {p:.2f}"
        return text, None
    if not cells:
        return "", None
    found = detectable_temperature_error(
        cells, sp.alpha / len(cells), power=sp.power, min_expected=sp.min_expected
    )
    return f"; {found.text(sp.power)}", found


def _p_text(fam: FamilyResult, against: str = "") -> str:
    p = fam.p_value
    if p is None:
        return "-"
    if against:
        return f"{_p_text(fam)} against {against}"
    if any(c.outside for c in fam.cells):
        outside = sum(len(c.outside) for c in fam.cells)
        return f"{outside} token(s) drawn outside the kept set"
    return f"p {p:.3g} ({len(fam.tested)} prompt(s), {fam.draws} draws)"


def _finding(
    name: str, title: str, fams: Mapping[str, FamilyResult], ev: SamplingEvidence, side: str,
    severity: Severity = Severity.MAJOR,
) -> Finding | None:  # fmt: skip
    fam = fams[side]
    worst = fam.worst
    if worst is None:
        return None
    cell = next((cd for cd in ev.cells if cd.cell.probe == worst.probe), None)
    other = "candidate" if side == "baseline" else "baseline"
    twin = next((c for c in fams[other].cells if c.probe == worst.probe), None)
    url = ev.candidate_url if side == "candidate" else ev.baseline_url
    body = {**(cell.request(side) if cell else {}), **({"model": ev.model} if ev.model else {})}
    who = "the baseline's own sampler (reported, never blocks)" if side == "baseline" else title
    mine, theirs = worst.summary, twin.summary if twin is not None else None
    return Finding(
        probe=worst.probe,
        category=f"sampling_{name}",
        severity=severity,
        side=side,
        message=f"{who}: {worst.summary} (p {worst.p_value or 0.0:.2g}; {EACH_DRAW})",
        baseline_excerpt=mine if side == "baseline" else theirs,
        candidate_excerpt=mine if side == "candidate" else theirs,
        curl=curl(url, "chat", body) if cell else None,
    )


def self_check(
    name: str,
    title: str,
    fams: Mapping[str, FamilyResult],
    ev: SamplingEvidence,
    policy: Policy,
    *,
    narrower: bool = False,
    row: str | None = None,
) -> Judged:
    """One self-consistency check: the candidate fails where the baseline passes."""
    b, c = fams["baseline"], fams["candidate"]
    findings: list[Finding] = []
    alpha = policy.sampling.alpha
    limit = f"adjusted p ≥ {alpha:g} (Bonferroni over the prompts)"
    key = "sampling.alpha"
    if b.failed:
        found = _finding(name, title, fams, ev, "baseline", Severity.INFO)
        findings += [found] if found else []
    if c.failed is None:
        why = c.reason or next((x.reason for x in c.cells if x.reason), "nothing was tested")
        return not_measured(name, title, f"candidate: {why}", row=row), findings
    if c.failed:
        found = _finding(name, title, fams, ev, "candidate")
        if b.failed is False:
            findings += [found] if found else []
    against = "its own report" if row else ""
    shown = {"candidate": _p_text(c, against), "baseline": _p_text(b, against)}
    if b.failed is None:
        why = b.reason or next((x.reason for x in b.cells if x.reason), "nothing was tested")
        return not_measured(name, title, f"baseline: {why}", row=row), findings
    if b.failed and c.failed:
        why = "both sides fail: the baseline's sampler does not match its report either (reported)"
        return not_measured(name, title, why, row=row), findings
    power, _ = _power_text(c, policy, narrower=narrower) if not c.failed else ("", None)
    reason = f"{shown['candidate']} where the baseline has {shown['baseline']}" if c.failed else ""
    return check(name, title, failed=c.failed, candidate=shown["candidate"],
                 baseline=shown["baseline"], limit=limit + power, policy_key=key, row=row,
                 reason=reason), findings  # fmt: skip


def _by(ev: SamplingEvidence, kind: Kind, temperature: float | None = None) -> list[CellDraws]:
    return [
        cd for cd in ev.cells
        if cd.cell.kind is kind and (temperature is None or cd.cell.temperature == temperature)
    ]  # fmt: skip


def _reference(
    ev: SamplingEvidence, policy: Policy
) -> tuple[dict[str, FamilyResult], dict[str, dict[str, Reported]]]:
    sp = policy.sampling
    fams: dict[str, FamilyResult] = {}
    reports: dict[str, dict[str, Reported]] = {}
    for side in SIDES:
        results, own = [], {}
        for cd in _by(ev, Kind.REFERENCE):
            result, report = reference_test(cd, side, sp.alpha, sp.min_expected)
            results.append(result)
            if report is not None:
                own[cd.cell.prompt_id] = report
        fams[side], reports[side] = family(results, sp.alpha), own
    return fams, reports


def _no_logprobs(ev: SamplingEvidence) -> str | None:
    base = ev.setup.get("baseline")
    if base is not None and not base.logprobs:
        return "the baseline returns no top logprobs with its draws"
    return None


def _homogeneity(
    ev: SamplingEvidence, policy: Policy, reports: Mapping[str, Reported], baseline_fit: bool | None
) -> tuple[Check, list[Finding], dict[str, MetricValue]]:
    """Baseline and candidate draw from one distribution at temperature 1, the baseline's own
    halves (even and odd draws) the A/A reference. A baseline that fails its own report at
    temperature 1 (`baseline_fit` True) is no reference: not measured (FAULTS.md 69)."""
    sp = policy.sampling
    name, title = "homogeneity", "baseline and candidate sample the same distribution"
    cells = _by(ev, Kind.REFERENCE)
    both = [cd for cd in cells if _any_ok(cd.baseline) and _any_ok(cd.candidate)]
    pairs = [
        homogeneity_test(cd.baseline, cd.candidate, cd.cell.probe,
                         reports.get(cd.cell.prompt_id), sp.min_expected)
        for cd in both
    ]  # fmt: skip
    halves = [
        homogeneity_test(cd.baseline[0::2], cd.baseline[1::2], cd.cell.probe,
                         reports.get(cd.cell.prompt_id), sp.min_expected)
        for cd in cells if _any_ok(cd.baseline)
    ]  # fmt: skip
    ab, aa = family(pairs, sp.alpha), family(halves, sp.alpha)
    metrics: dict[str, MetricValue] = {"homogeneity_p": ab.p_value, "homogeneity_aa_p": aa.p_value}
    if ab.failed is None:
        return not_measured(name, title, "no prompt has draws on both sides", row=ROW), [], metrics
    if aa.failed:
        why = (f"the baseline's own halves differ ({_p_text(aa)}): its draws do not come from one "
               "distribution, so a second server cannot be compared with them")  # fmt: skip
        return not_measured(name, title, why, row=ROW), [], metrics
    if baseline_fit:
        why = ("the baseline's sampler does not match its own report at temperature 1 "
               "(reference_fit): its draws are no reference for the candidate's")  # fmt: skip
        return not_measured(name, title, why, row=ROW), [], metrics
    findings: list[Finding] = []
    worst = ab.worst
    if ab.failed and worst is not None:
        cd = next(cd for cd in cells if cd.cell.probe == worst.probe)
        body = {**cd.candidate_request, **({"model": ev.model} if ev.model else {})}
        findings.append(Finding(
            probe=worst.probe, category="sampling_homogeneity", severity=Severity.MAJOR,
            side="candidate",
            message=f"{title}: {worst.summary} (p {worst.p_value:.2g}; {EACH_DRAW})",
            baseline_excerpt=drawn(cd.baseline), candidate_excerpt=drawn(cd.candidate),
            curl=curl(ev.candidate_url, "chat", body),
        ))  # fmt: skip
    power, x = _power_text(ab, policy) if not ab.failed else ("", None)
    metrics["homogeneity_detectable_lower"] = x.lower if x else None
    metrics["homogeneity_detectable_higher"] = x.higher if x else None
    limit = f"adjusted p ≥ {sp.alpha:g} (Bonferroni over the prompts; A/A halves must pass)"
    return check(name, title, failed=ab.failed, candidate=_p_text(ab, "the baseline's draws"),
                 baseline=f"A/A halves: {_p_text(aa)}", limit=limit + power,
                 policy_key="sampling.alpha", row=ROW,
                 reason=f"{_p_text(ab)}" if ab.failed else ""), findings, metrics  # fmt: skip


def _any_ok(draws: Sequence[Completion]) -> bool:
    return any(c.ok for c in draws)


def _mode_check(modes: Mapping[str, LogprobsMode], ev: SamplingEvidence) -> Judged:
    name, title = "logprobs_mode", "logprobs under sampling: raw or processed, as the baseline's"
    b, c = modes["baseline"], modes["candidate"]
    if b.mode is None:
        return not_applicable(name, title, f"baseline: {b.reason}"), []
    if c.mode is None:
        return not_measured(name, title, f"candidate: {c.reason}"), []
    if b.mode == "unclear":
        return not_measured(name, title, f"the baseline's logprobs read neither way: {b.text}"), []
    changed = c.mode != b.mode
    reason = (
        f"the baseline returns {b.mode} logprobs under sampling, the candidate {c.mode}: what a "
        "consumer of logprobs reads at the same request changed (raw: the model's distribution "
        "before temperature and truncation; processed: after them; vLLM #9453, --logprobs-mode)"
    )
    found = check(name, title, failed=changed, candidate=c.text, baseline=b.text,
                  limit="the baseline's mode", reason=reason if changed else "")  # fmt: skip
    cell = next((cd for cd in ev.cells if cd.cell.kind is Kind.TEMPERED), None)
    if not changed or cell is None:
        return found, []
    body = {**cell.candidate_request, **({"model": ev.model} if ev.model else {})}
    finding = Finding(probe=cell.cell.probe, category="sampling_logprobs_mode",
                      severity=Severity.MAJOR, side="candidate", message=reason,
                      baseline_excerpt=b.text, candidate_excerpt=c.text,
                      curl=curl(ev.candidate_url, "chat", body))  # fmt: skip
    return found, [finding]


def _tempered(
    ev: SamplingEvidence, policy: Policy, reports: Mapping[str, Mapping[str, Reported]], t: float
) -> Judged:
    name, title = f"temperature_{t:g}", f"temperature {t:g} follows the tempered report"
    cells = _by(ev, Kind.TEMPERED, t)
    sp = policy.sampling

    def tested(side: str) -> FamilyResult:
        own = reports[side]
        return family(
            [tempered_test(cd, side, own.get(cd.cell.prompt_id), sp.min_expected) for cd in cells],
            sp.alpha,
        )

    return self_check(name, title, {s: tested(s) for s in SIDES}, ev, policy)


def _truncation(
    ev: SamplingEvidence, policy: Policy, reports: Mapping[str, Mapping[str, Reported]], kind: Kind
) -> Judged:
    name, title = str(kind), TITLES[kind]
    cells = _by(ev, kind)
    left_out = dict(ev.unplanned).get(name)
    if left_out is not None or not cells:
        return not_measured(name, title, left_out or "no cell was planned"), []
    refusals = {side: refused(cells, side) for side in SIDES}
    if refusals["baseline"]:
        why = f"the baseline refuses {kind}: {refusals['baseline']}"
        return not_applicable(name, title, why), []
    if refusals["candidate"]:
        why = f"the candidate refuses {kind}, which the baseline samples with: "
        why += str(refusals["candidate"])
        body = {**cells[0].candidate_request, **({"model": ev.model} if ev.model else {})}
        finding = Finding(
            probe=cells[0].cell.probe,
            category=f"sampling_{kind}",
            severity=Severity.MAJOR,
            side="candidate",
            message=why,
            curl=curl(ev.candidate_url, "chat", body),
        )
        failed = check(name, title, failed=True, candidate="refused", baseline="sampled",
                       limit="offered as the baseline offers it", reason=why)  # fmt: skip
        return failed, [finding]
    sp = policy.sampling

    def tested(side: str) -> FamilyResult:
        own = reports[side]
        return family(
            [truncation_test(cd, side, own.get(cd.cell.prompt_id), sp.min_expected)
             for cd in cells],
            sp.alpha,
        )  # fmt: skip

    return self_check(name, title, {s: tested(s) for s in SIDES}, ev, policy, narrower=True)


def _sequence_checks(ev: SamplingEvidence, policy: Policy) -> list[Judged]:
    """Seeds, n > 1 and penalties, for the kinds the plan asked."""
    kinds = ("seed", "choices", "penalty", production.KIND)
    of = {kind: [d for d in ev.sequences if d.kind == kind] for kind in kinds}
    url = ev.candidate_url
    judged: list[Judged] = []
    if ev.plan.seeds:
        judged.append(seed_check(of["seed"], url))
    if ev.plan.choices_requests:
        judged.append(choices_check(of["choices"], url))
    if ev.plan.penalty_draws:
        judged += penalty_checks(of["penalty"], url, policy.sampling.alpha)
    if ev.plan.production_repeats:
        judged += production.production_checks(of[production.KIND], url, policy.sampling)
    return judged


def _hangs(ev: SamplingEvidence, policy: Policy) -> Check:
    answers = [a for d in ev.sequences for a in d.candidate if isinstance(a, Completion)]
    answers += [c for cd in ev.cells for c in cd.candidate]
    hung = sum(1 for c in answers if timed_out(c))
    sent = len(answers)
    return check(
        "hangs",
        "draws that hung",
        failed=hung > policy.hangs_max if sent else None,
        candidate=str(hung),
        limit=f"≤ {policy.hangs_max}",
        policy_key="hangs_max",
        row="hangs",
        reason="" if sent else "no draw was sent to the candidate",
    )


def evaluate(ev: SamplingEvidence, policy: Policy, *, strict: bool = False) -> GateResult:
    """Judge the draws (pure)."""
    fams, reports = _reference(ev, policy)
    no_logprobs = _no_logprobs(ev)
    judged: list[Judged] = []
    if no_logprobs:  # every test against a report needs the report
        names = [("reference_fit", TITLES[Kind.REFERENCE])]
        names += [(f"temperature_{t:g}", f"temperature {t:g} follows the tempered report")
                  for t in ev.plan.temperatures]  # fmt: skip
        names += [(str(k), TITLES[k]) for k in TRUNCATIONS if k in ev.plan.truncations]
        judged += [(not_applicable(n, title, no_logprobs), []) for n, title in names]
    else:
        judged.append(
            self_check("reference_fit", TITLES[Kind.REFERENCE], fams, ev, policy, row=ROW)
        )
        judged += [_tempered(ev, policy, reports, t) for t in ev.plan.temperatures]
        judged += [_truncation(ev, policy, reports, k) for k in TRUNCATIONS
                   if k in ev.plan.truncations]  # fmt: skip
    homogeneous, found, metrics = _homogeneity(
        ev, policy, reports["baseline"], fams["baseline"].failed
    )
    judged.append((homogeneous, found))
    modes = {side: logprobs_mode(ev.cells, side, reports[side]) for side in SIDES}
    judged.append(_mode_check(modes, ev))
    judged += _sequence_checks(ev, policy)
    if ev.plan.bias_draws:
        biased = [*_by(ev, Kind.BAN), *_by(ev, Kind.FORCE)]
        judged.append(bias_check(biased, ev.bias, ev.bias_unplanned, ev.candidate_url, ev.model,
                                 policy.sampling.power))  # fmt: skip
    checks = [c for c, _ in judged] + [_hangs(ev, policy)]
    findings = [f for _, more in judged for f in more]
    metrics.update({
        "draws_baseline": sum(len(cd.baseline) for cd in ev.cells),
        "draws_candidate": sum(len(cd.candidate) for cd in ev.cells),
        # every request each side was sent: the draws, the longer answers and the pilot's
        "requests_baseline": _requests(ev, "baseline"),
        "requests_candidate": _requests(ev, "candidate"),
        "seconds": round(ev.seconds, 1),
        # where the time went: first tokens (max_tokens 1) against the longer answers by kind
        "seconds_first_tokens": round(ev.first_token_seconds, 1),
        "seconds_longer_answers": round(ev.seconds - ev.first_token_seconds, 1),
        **{f"requests_{kind}_candidate": n for kind, n in _by_kind(ev).items()},
        "baseline_logprobs_mode": modes["baseline"].mode,
        "candidate_logprobs_mode": modes["candidate"].mode,
        "baseline_neutral_sampler": _setup_text(ev, "baseline"),
        "candidate_neutral_sampler": _setup_text(ev, "candidate"),
        **_concurrency(ev),
    })  # fmt: skip
    return gate_result(NAME, checks, strict=strict, findings=findings, metrics=metrics)


def _by_kind(ev: SamplingEvidence) -> dict[str, int]:
    """The candidate's requests by kind: first-token draws, then each kind of longer answer."""
    out = {"first_token": sum(len(cd.candidate) for cd in ev.cells)}
    for d in ev.sequences:
        out[d.kind] = out.get(d.kind, 0) + len(d.candidate)
    return out


def _concurrency(ev: SamplingEvidence) -> dict[str, MetricValue]:
    """How many longer answers each side was sent at once, and the batching measurement behind
    it (the first-token draws went `plan.concurrency` at a time on both)."""
    out: dict[str, MetricValue] = {"draws_at_once": ev.plan.concurrency}
    for side in SIDES:
        setup = ev.setup.get(side)
        if setup is not None:
            out[f"{side}_answers_at_once"] = setup.concurrency
            if setup.batching is not None:
                out[f"{side}_batching"] = setup.batching.why
    return out


def _requests(ev: SamplingEvidence, side: str) -> int:
    setup = ev.setup.get(side)
    pilots = len(setup.tried) + setup.measuring_requests if setup is not None else 0
    longer = sum(len(d.side(side)) for d in ev.sequences)
    return pilots + longer + sum(len(cd.side(side)) for cd in ev.cells)


def _setup_text(ev: SamplingEvidence, side: str) -> str | None:
    setup = ev.setup.get(side)
    if setup is None:
        return None
    return setup.text
