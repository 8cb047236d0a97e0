"""Correctness under load: every answer of the load phase is checked, and greedy answers given
under concurrency are compared with the same prompts answered alone.

A server may legitimately vary with batch composition, so the baseline's own disagreement
(alone vs under load) is the noise floor: the candidate fails when its share of differing answers
exceeds `noise_k × floor + tolerance.load_mismatch_rate`. A candidate correct alone and wrong when
batching fails with the number of requests in flight at which it broke and an example pair.
Where the blocks ran below the asked concurrency (a baseline that interrupts in-flight requests),
the blocks' prompts are sent again at the asked concurrency and their whole answers compared with
the same prompts alone: at concurrency 1 a batch-only fault cannot show.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from servegate.config.models import Policy
from servegate.gates.evidence import curl, describe
from servegate.gates.performance.plan import (
    AloneAnswer,
    PerformanceEvidence,
    SideLoad,
    in_flight_counts,
    whole_answers,
)
from servegate.load.correctness import check_responses
from servegate.load.driver import Exchange, StepEvidence
from servegate.stats.degeneration import degeneration_metrics, severe_kind
from servegate.stats.divergence import first_divergence, noise_limit
from servegate.stats.paired import PairedCounts, mcnemar_exact
from servegate.verdict.judgement import check, not_applicable, not_measured
from servegate.verdict.model import Check, Finding, Severity

__all__ = ["agreement_under_load", "early_divergence", "load_checks", "pairs_needed"]


_FIELDS = ("degenerate", "empty", "error_body", "json_invalid", "tool_calls_invalid")


@dataclass(frozen=True)
class _Problem:
    """Why one answer under load fails a load check: its kind (the check, and for degenerate
    text the degeneration kind: loop, symbol-run, abnormal) and the check's words."""

    kind: str
    text: str


def _problem(x: Exchange) -> _Problem | None:
    counts = check_responses([(x.item, x.completion)])
    if not counts.problems or not counts.examples:
        return None
    field_ = next(f for f in _FIELDS if getattr(counts, f))
    if field_ == "degenerate":
        found = severe_kind(degeneration_metrics(x.completion.text))
        field_ = f"degenerate ({found[0]})" if found else field_
    return _Problem(field_, counts.examples[0].problem)


def load_checks(ev: PerformanceEvidence, b: SideLoad, c: SideLoad, policy: Policy) -> Check:
    """Answers under load that fail a load check, paired by request (both sides answer the same
    prompts). A kind of failure the baseline never shows blocks on its own; a kind it shows
    itself (a small model looping on some prompts, which ones moving with batching) is judged as
    a paired rate: requests only the candidate fails against those only the baseline fails."""
    title = "answers under load failing the load checks where the baseline's passed"
    row, limit = "answers checked under load", policy.severe_degeneration_max
    # A request that failed outright is the error rate's business, not paired here.
    base = {x.index: found for x in b.exchanges if (found := _problem(x)) or x.completion.ok}
    cand = {x.index: _problem(x) for x in c.exchanges}
    paired = [i for i in cand if i in base]
    if not paired:
        why = "no request answered by both sides under load"
        return not_measured("load_checks", title, why, row=row)
    kinds = {p.kind for p in base.values() if p is not None}
    regressed = [i for i in paired if base[i] is None and cand[i] is not None]
    new_kind = [i for i in regressed if (seen := cand[i]) is not None and seen.kind not in kinds]
    # The baseline's own kinds, paired: a new kind is judged on its own above, not here.
    counts = PairedCounts.from_outcomes(
        [base[i] is None for i in paired],
        [cand[i] is None or i in new_kind for i in paired],
    )
    excess = counts.regressions - counts.improvements
    p = mcnemar_exact(counts).p_candidate_worse
    failed = len(new_kind) > limit or (excess > limit and p < policy.significance_alpha)
    bad_b = sum(v is not None for v in base.values())
    bad_c = sum(v is not None for v in cand.values())
    reason = ""
    if failed:
        new = len(new_kind) > limit
        shown = new_kind[0] if new else regressed[0]
        why = (
            f"{len(new_kind)} of a kind the baseline never shows"
            if new
            else f"{excess} more than the baseline (McNemar p={p:.3g})"
        )
        example = cand[shown]
        reason = f"{len(regressed)} regressed, {why}; e.g. request {shown}: " + (
            example.text if example else ""
        )
    return check(
        "load_checks",
        title,
        failed=failed,
        baseline=f"{bad_b}/{len(b.exchanges)} failing ({', '.join(sorted(kinds)) or 'none'}); "
        f"{counts.improvements} only the baseline",
        candidate=f"{len(regressed)} regressed ({bad_c}/{len(c.exchanges)} failing), "
        f"{len(new_kind)} of a new kind; McNemar p={p:.3g}",
        limit=f"≤ {limit} of a kind the baseline never shows; of its own kinds, fails when the "
        f"excess over the baseline > {limit} and p < {policy.significance_alpha:g}",
        policy_key="severe_degeneration_max, significance_alpha",
        row=row,
        reason=reason,
    )


@dataclass(frozen=True)
class _Agreement:
    compared: int
    differ: list[
        tuple[AloneAnswer, Exchange, int]
    ]  # (alone answer, under load, requests in flight)
    # prompt index -> the word at which the answer under load parts from the one alone (None:
    # equal), for every prompt compared
    parts_at: dict[int, int | None] = field(default_factory=dict)


def _loaded(ev: PerformanceEvidence, side: SideLoad) -> tuple[dict[int, Exchange], dict[int, int]]:
    """The answers under load to compare with the same prompts alone, and each one's requests in
    flight: the blocks', or, where the blocks ran below the asked concurrency, the whole answers
    of the first block's prompts sent again at the asked one."""
    if not ev.concurrent:
        return {x.index: x for x in side.exchanges}, side.in_flight
    step = ev.concurrent.get(side.name)
    if step is None:
        return {}, {}
    return {x.index: x for x in served_together(step)}, in_flight_counts(step.exchanges)


def served_together(step: StepEvidence) -> list[Exchange]:
    """The whole answers of `step` generated while another of its requests was in flight (from
    the answer's first token to its end). A server that cuts every request in flight for a newer
    one answers whole only the request it serves alone: batching never touched that answer."""
    out = []
    for x in whole_answers(step):
        timing = x.completion.timing
        begin = timing.token_chunk_ns[0] if timing and timing.token_chunk_ns else x.started_ns
        others = (o for o in step.exchanges if o is not x)
        if any(o.started_ns < x.finished_ns and o.finished_ns > begin for o in others):
            out.append(x)
    return out


def _agreement(ev: PerformanceEvidence, side: SideLoad) -> _Agreement:
    loaded, in_flight = _loaded(ev, side)
    compared, differ, parts_at = 0, [], {}
    for alone in ev.alone[side.name]:
        x = loaded.get(alone.index)
        if x is None or not (x.completion.ok and alone.completion.ok):
            continue
        compared += 1
        parts_at[alone.index] = first_divergence(
            alone.completion.text.split(), x.completion.text.split()
        )
        if x.completion.text != alone.completion.text:
            differ.append((alone, x, in_flight.get(x.index, 1)))
    return _Agreement(compared, differ, parts_at)


def early_divergence(ev: PerformanceEvidence, b: SideLoad, c: SideLoad, policy: Policy) -> Check:
    """Answers under load that part from the same prompt alone within their first
    `load_early_divergence_words` words, paired by prompt: a server that is not batch-invariant
    parts late (near-tie flips), a batch-only corruption at once."""
    title = "temperature-0 answers under load that part from the same prompt alone at once"
    words = policy.load_early_divergence_words
    if why := _never_together(ev):
        return not_applicable("early_divergence", title, why)
    ab, ac = _agreement(ev, b), _agreement(ev, c)
    both = sorted(set(ab.parts_at) & set(ac.parts_at))
    if not both:
        why = "no prompt answered both alone and under load on both sides"
        return not_measured("early_divergence", title, why)
    if 0.5 ** len(both) >= policy.significance_alpha:
        why = (
            f"{len(both)} prompts answered both alone and under load on both sides: McNemar's "
            f"exact test cannot reach p < {policy.significance_alpha:g} with fewer than "
            f"{pairs_needed(policy.significance_alpha)} (isolated_prompts "
            f"{ev.settings.isolated_prompts}, {_concurrency(ev)})"
        )
        return not_measured("early_divergence", title, why)

    def early(at: int | None) -> bool:
        return at is not None and at < words

    base = [early(ab.parts_at[i]) for i in both]
    cand = [early(ac.parts_at[i]) for i in both]
    counts = PairedCounts.from_outcomes([not e for e in base], [not e for e in cand])
    floor = sum(base) / len(both)
    limit = noise_limit(floor, policy.noise_k, policy.tolerance_for(ev.model).load_mismatch_rate)
    share = sum(cand) / len(both)
    p = mcnemar_exact(counts).p_candidate_worse
    failed = share > limit and p < policy.significance_alpha

    def where(parts: dict[int, int | None]) -> str:
        at = sorted(v for i in both if (v := parts[i]) is not None)
        return f"parts at word {', '.join(map(str, at))}" if at else "none parts"

    return check(
        "early_divergence",
        title,
        failed=failed,
        baseline=f"{sum(base)}/{len(both)} within {words} words ({where(ab.parts_at)})",
        candidate=f"{sum(cand)}/{len(both)} within {words} words ({where(ac.parts_at)}; "
        f"McNemar p={p:.3g})",
        limit=f"fails when > {limit:.2f} = {policy.noise_k:g} × floor {floor:.2f} + "
        f"{policy.tolerance_for(ev.model).load_mismatch_rate:g} and p < "
        f"{policy.significance_alpha:g}",
        policy_key="load_early_divergence_words, tolerance.load_mismatch_rate",
        reason=f"{sum(cand)} of {len(both)} answers under load part from the same prompt alone "
        f"within {words} words (baseline {sum(base)}), at {_concurrency(ev)}"
        if failed
        else "",
    )


def pairs_needed(alpha: float) -> int:
    """The fewest paired prompts with which a one-sided exact McNemar test can reach p < alpha:
    every pair discordant against the candidate gives p = 0.5 ** n."""
    n = 1
    while 0.5**n >= alpha:
        n += 1
    return n


def _never_together(ev: PerformanceEvidence) -> str:
    """Why agreement under load cannot be measured at all ("" when it can): the baseline, sent
    the asked concurrency again, served no request while another was in flight."""
    step = ev.concurrent.get("baseline")
    if not ev.concurrent or step is None or served_together(step):
        return ""
    return (
        f"the baseline serves no request while another is in flight: at {_concurrency(ev)} it "
        f"answered {len(whole_answers(step))} of {len(step.exchanges)} whole, each alone, and "
        "cut the others short with no content; batching cannot change an answer it never serves"
    )


def _concurrency(ev: PerformanceEvidence) -> str:
    if ev.concurrent and ev.pilots:
        return (
            f"concurrency {ev.pilots[0].concurrency} (whole answers only: the blocks ran at "
            f"{ev.settings.concurrency}, the highest the baseline served whole)"
        )
    return f"concurrency {ev.settings.concurrency}"


def agreement_under_load(
    ev: PerformanceEvidence, b: SideLoad, c: SideLoad, policy: Policy
) -> tuple[Check, list[Finding]]:
    title = "temperature-0 answers under load that differ from the same prompt alone"
    row = "agreement under load"
    ab, ac = _agreement(ev, b), _agreement(ev, c)
    if why := _never_together(ev):
        return not_applicable("agreement_under_load", title, why, row=row), []
    if not ab.compared or not ac.compared:
        why = (
            f"prompts answered both alone and under load: baseline {ab.compared}, candidate "
            f"{ac.compared} (isolated_prompts {ev.settings.isolated_prompts}, "
            f"{_concurrency(ev)})"
        )
        return not_measured("agreement_under_load", title, why, row=row), []
    floor = len(ab.differ) / ab.compared
    tol = policy.tolerance_for(ev.model).load_mismatch_rate
    limit = noise_limit(floor, policy.noise_k, tol)
    share = len(ac.differ) / ac.compared
    failed = share > limit
    findings: list[Finding] = []
    reason = ""
    if failed:
        alone, x, flying = min(ac.differ, key=lambda d: d[2])
        broke = min(d[2] for d in ac.differ)
        reason = (
            f"{len(ac.differ)}/{ac.compared} answers differ under load (baseline "
            f"{len(ab.differ)}/{ab.compared}), from {broke} requests in flight at "
            f"{_concurrency(ev)}"
        )
        findings.append(
            Finding(
                probe=f"alone:{alone.item.label}",
                category="load_disagreement",
                severity=Severity.CRITICAL,
                side="candidate",
                message=f"correct alone, different when batching: {reason}",
                baseline_excerpt=f"candidate alone: {describe(alone.completion)}",
                candidate_excerpt=f"candidate with {flying} in flight: {describe(x.completion)}",
                curl=curl(ev.candidate_url, alone.item.api, alone.item.body),
            )
        )
    return check(
        "agreement_under_load",
        title,
        failed=failed,
        baseline=f"{len(ab.differ)}/{ab.compared} differ",
        candidate=f"{len(ac.differ)}/{ac.compared} differ",
        limit=f"≤ {limit:.2f} = {policy.noise_k:g} × floor {floor:.2f} + {tol:g}",
        policy_key="tolerance.load_mismatch_rate",
        row=row,
        reason=reason,
    ), findings
