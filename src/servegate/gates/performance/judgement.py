"""How the performance gate judges: latency P95s, throughput, errors, and correctness under load.

Every metric is one `Check` (verdict/judgement.py). A latency or throughput ratio is decided in
looks.py — by its exact interval over blocks against its band, at planned looks with alpha spent
over them — and becomes a check here with the reason a reader can check: which bound decided and
why, the Mann-Whitney test it is equivalent to, and the look. Undecided at the last look is *not
measured*, with the interval, band, blocks and look in the reason: TTFT and E2EL are core, so the
gate is then inconclusive. Every look is in the details (`sequential`). The unit of every
comparison is the load block, not the request: requests of one block share the machine's state,
so one block disturbed by another process moves a block statistic once instead of making ten
"independent" slow requests (measured: clean vs clean on the reference engine failed 2 runs of 3
when latencies were tested per request, RESULTS.md). Too few samples is *not measured*, never a
pass. With a baseline replica measured in the same blocks, each band widens by the baseline's own
deviation from its replica (the A/A floor, `performance_aa_k`); beyond `performance_aa_max` the
widened band has no teeth and the metric is not measured. Without one the report says the floor
is not measured. Answers under load are checked twice: by the load checks (paired with the
baseline's answer to the same request), and against the same prompt answered alone, judged
against the baseline's own disagreement (the noise floor).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from math import isfinite
from typing import Any

from servegate.config.models import Policy
from servegate.gates.performance.capacity import capacity_check, capacity_details
from servegate.gates.performance.looks import (
    LATENCIES,
    SEQUENTIAL,
    THROUGHPUT,
    AAFloor,
    RatioJudgement,
    aa_floor,
    look_judgements,
    look_schedule,
    looks_details,
    times,
)
from servegate.gates.performance.plan import (
    NAME,
    REPLICA,
    SIDES,
    Block,
    PerformanceEvidence,
    SideLoad,
    all_timed_out,
    side_load,
)
from servegate.gates.performance.under_load import (
    agreement_under_load,
    early_divergence,
    load_checks,
)
from servegate.load.metrics import measure
from servegate.load.server_metrics import ServerEvidence, ServerMetrics, summarise_server
from servegate.stats.distribution import DistributionSummary
from servegate.stats.mann_whitney import smallest_p
from servegate.stats.proportions import rate_increase
from servegate.stats.shift_interval import ShiftInterval
from servegate.verdict.judgement import check, gate_result, not_measured
from servegate.verdict.model import Check, Finding, GateResult, MetricValue, Outcome, Severity

__all__ = ["evaluate"]


def _num(value: float | None, unit: str) -> str:
    return "-" if value is None else f"{value:.4g} {unit}"


def _too_few_blocks(nb: int, nc: int, level: float, change: str) -> str:
    """Why `nb` and `nc` blocks cannot bound a ratio at `level`."""
    return (
        f"{nb} baseline and {nc} candidate blocks cannot show a significant {change} "
        f"(smallest possible p {smallest_p(nb, nc):.2g} ≥ {level:.2g}); run more blocks"
    )


def _interval(ci: ShiftInterval | None) -> str:
    if ci is None:
        return "-"
    high = "∞" if not isfinite(ci.high) else f"{ci.high:.2f}"
    return f"{ci.low:.2f}–{high}× ({ci.confidence:.1%})"


@dataclass(frozen=True)
class _Looks:
    """The looks the run planned, and why they stopped for time (None: they did not)."""

    planned: int
    stopped: str | None


def _decided_by(j: RatioJudgement, looks: _Looks, limit: float) -> str:
    """The reason of a decided or undecided ratio: which bound decided and why, the test it
    is equivalent to and the look."""
    ci, band = j.interval, j.band
    assert ci is not None
    assert band is not None
    look = j.look
    at = (
        f"look {look.number} of {looks.planned}, {look.blocks} blocks a side, "
        f"one-sided level {look.level:.2g}"
    )
    side, word = ("greater", "slowdown") if j.increase else ("less", "drop")
    beyond, within = (">", "≤") if j.increase else ("<", "≥")
    p = ci.p_value(side)
    test = f"Mann-Whitney one-sided p = {p:.2g}"
    shown = f"ratio {times(ci.estimate)}, interval {_interval(ci)}"
    if j.decision == "fail":
        bound = "lower" if j.increase else "upper"
        value = ci.low if j.increase else ci.high
        return (
            f"{bound} bound {times(value)} {beyond} band {band:.2f}×: the {word} is beyond the "
            f"band ({shown}; {test} ≤ {look.level:.2g}; {at})"
        )
    if j.decision == "pass":
        bound = "upper" if j.increase else "lower"
        value = ci.high if j.increase else ci.low
        text = (
            f"{bound} bound {times(value)} {within} band {band:.2f}×: any {word} is within the "
            f"band ({shown}; {at})"
        )
        floor = j.floor
        own = value > limit if j.increase else value < limit
        if floor is not None and floor.ratio is not None and own:
            text += (
                f"; beyond {limit:.2f}× but inside the A/A floor (the replica is "
                f"{times(floor.ratio)} the baseline in the same blocks)"
            )
        return text
    if not ci.bounded:
        change = "rise" if j.increase else "drop"
        return _too_few_blocks(ci.n_baseline, ci.n_candidate, look.level, change)
    if look.number < looks.planned:
        return (
            f"undecided when the blocks stopped: interval {_interval(ci)} holds the band "
            f"{band:.2f}× (ratio {times(ci.estimate)}; {test}; {at}); no later look ran ("
            + (
                f"no time: {looks.stopped}"
                if looks.stopped is not None
                else "only an undecided TTFT, E2EL or throughput runs a later look, and this "
                "check is none of them"
                if j.metric not in SEQUENTIAL
                else "another latency or throughput had failed, or a side stopped answering"
            )
            + ")"
        )
    return (
        f"undecided at the most blocks: interval {_interval(ci)} holds the band {band:.2f}×, "
        f"so neither a {word} beyond it nor one within it is shown (ratio {times(ci.estimate)}; "
        f"{test}; {at}); run more blocks (performance.max_blocks) on a quieter machine"
    )


def _outcome(j: RatioJudgement) -> bool | None:
    return {"fail": True, "pass": False}.get(j.decision)


def _latency(
    metric: str,
    title: str,
    row: str,
    core: bool,
    b: SideLoad,
    c: SideLoad,
    j: RatioJudgement,
    policy: Policy,
    looks: _Looks,
) -> Check:
    """Judged per block, the unit that is independent: requests of one block share the
    machine's state (another process on a shared core slows all of them), so a test over
    requests would call one disturbed block significant. The ratio is the Hodges-Lehmann
    shift of log block P95s, its interval the exact one that inverts the Mann-Whitney U over
    block P95s at the look's level."""
    bv, cv = b.values(metric), c.values(metric)
    allowed = policy.p95_latency_regression_max
    n = policy.performance_min_samples
    if len(bv) < n or len(cv) < n:
        why = f"too few samples: baseline {len(bv)}, candidate {len(cv)} (need {n} each)"
        return not_measured(metric, title, why, core=core, row=row)
    if j.decision == "not measured":
        return not_measured(metric, title, j.why, core=core, row=row)
    assert j.floor is not None
    pooled = (DistributionSummary.from_values(v).p95 for v in (bv, cv))
    block = (
        DistributionSummary.from_values(v).p50 for v in (b.block_p95s(metric), c.block_p95s(metric))
    )
    ci = j.interval
    return check(
        metric,
        title,
        failed=_outcome(j),
        baseline=f"{_num(next(pooled), 'ms')} (median block {_num(next(block), 'ms')})",
        candidate=f"{_num(next(pooled), 'ms')} (median block {_num(next(block), 'ms')})",
        ratio="-" if ci is None else times(ci.estimate),
        interval=_interval(ci),
        limit=f"block P95 ratio ≤ {_band(1 + allowed, j.floor)}: fails when the interval's "
        f"lower bound is beyond, passes when its upper bound is within; {j.floor.text()}",
        policy_key="p95_latency_regression_max",
        core=core,
        row=row,
        reason="block P95s: " + _decided_by(j, looks, 1 + allowed),
    )


def _band(limit: float, floor: AAFloor) -> str:
    """The policy's limit, and what the A/A floor widened it to."""
    if floor.ratio is None:
        return f"{limit:.2f}×"
    if limit >= 1:
        return f"{limit:.2f}× × A/A {floor.widen:.2f} = {limit * floor.widen:.2f}×"
    return f"{limit:.2f}× ÷ A/A {floor.widen:.2f} = {limit / floor.widen:.2f}×"


def _throughput(
    b: SideLoad, c: SideLoad, j: RatioJudgement, policy: Policy, looks: _Looks
) -> Check:
    title, row = "output tokens/s, candidate / baseline", "throughput"
    allowed = policy.throughput_drop_max
    if j.decision == "not measured":
        return not_measured(THROUGHPUT, title, j.why, row=row)
    assert j.floor is not None
    med = (DistributionSummary.from_values(v).p50 for v in (b.block_rates, c.block_rates))
    ci = j.interval
    return check(
        THROUGHPUT,
        title,
        failed=_outcome(j),
        baseline=_num(next(med), "tok/s"),
        candidate=_num(next(med), "tok/s"),
        ratio="-" if ci is None else times(ci.estimate),
        interval=_interval(ci),
        limit=f"block throughput ratio ≥ {_band(1 - allowed, j.floor)}: fails when the "
        f"interval's upper bound is beyond, passes when its lower bound is within; "
        + j.floor.text(),
        policy_key="throughput_drop_max",
        row=row,
        reason="block throughputs: " + _decided_by(j, looks, 1 - allowed),
    )


def _errors(b: SideLoad, c: SideLoad, policy: Policy) -> Check:
    title = "error rate under load, candidate − baseline"
    nb, nc = len(b.measures), len(c.measures)
    if not nb or not nc:
        why = f"requests measured: baseline {nb}, candidate {nc}"
        return not_measured("error_rate", title, why, core=True, row="error rate")
    inc = rate_increase(b.failed, nb, c.failed, nc)
    assert inc.increase is not None
    allowed, alpha = policy.error_rate_increase_max, policy.significance_alpha
    failed = inc.regressed(allowed, alpha)
    return check(
        "error_rate",
        title,
        failed=failed,
        baseline=f"{b.failed}/{nb} ({b.failed / nb:.1%})",
        candidate=f"{c.failed}/{nc} ({c.failed / nc:.1%})",
        ratio=f"{inc.increase * 100:+.1f} pts",
        limit=f"≤ +{allowed * 100:g} pts unless not significant (Fisher p < {alpha:g})",
        policy_key="error_rate_increase_max",
        core=True,
        row="error rate",
        reason=f"{inc.increase * 100:+.1f} points, one-sided Fisher exact p = {inc.p_value:.2g}",
    )


def _metrics(sides: Sequence[SideLoad]) -> dict[str, MetricValue]:
    out: dict[str, MetricValue] = {}
    for s in sides:
        for metric in ("ttft_ms", "tpot_ms", "e2el_ms"):
            summary = DistributionSummary.from_values(s.values(metric))
            out[f"{s.name}_{metric.removesuffix('_ms')}_p50_ms"] = summary.p50
            out[f"{s.name}_{metric.removesuffix('_ms')}_p95_ms"] = summary.p95
        out[f"{s.name}_output_tokens_per_s"] = DistributionSummary.from_values(s.block_rates).p50
        out[f"{s.name}_requests"] = len(s.measures)
        out[f"{s.name}_failed"] = s.failed
    return out


def _floor_details(b: SideLoad, r: SideLoad | None, policy: Policy) -> dict[str, object]:
    """Each metric's A/A floor as judged, for the JSON report."""
    out: dict[str, object] = {
        metric: aa_floor(
            metric, b.block_p95s(metric), None if r is None else r.block_p95s(metric), policy
        ).details()
        for metric, *_ in LATENCIES
    }
    rates = None if r is None else r.block_rates
    out["output_tokens_per_s"] = aa_floor(
        "output_tokens_per_s", b.block_rates, rates, policy
    ).details()
    return out


def _block_detail(blk: Block) -> dict[str, object]:
    """One block as run: what was sent and, per latency, the P95 the judgement compares."""
    step = blk.step
    measures = [measure(x.completion) for x in step.exchanges] if step else []
    out: dict[str, object] = {
        "side": blk.side,
        "block": blk.number,
        "not_sent": blk.not_sent or None,
        "sent": len(measures),
        "ok": sum(m.ok for m in measures),
    }
    for metric, *_ in LATENCIES:
        values = [v for m in measures if m.ok and (v := getattr(m, metric)) is not None]
        p95 = DistributionSummary.from_values(values).p95
        out[f"{metric.removesuffix('_ms')}_p95_ms"] = None if p95 is None else round(p95, 2)
    return out


def server_metrics(ev: PerformanceEvidence, side: str) -> ServerMetrics | None:
    """One side's server gauges over all its blocks; None when they were not asked for."""
    seen: list[ServerEvidence] = [
        step.server for step in ev.side_blocks(side) if step.server is not None
    ]
    return summarise_server(seen) if seen else None


def _server_values(servers: dict[str, ServerMetrics | None]) -> dict[str, MetricValue]:
    out: dict[str, MetricValue] = {}
    for side, server in servers.items():
        for g in server.gauges if server is not None else ():
            out[f"{side}_server_{g.key}_mean"] = g.mean
            out[f"{side}_server_{g.key}_max"] = g.max
    return out


def _served_findings(ev: PerformanceEvidence) -> list[Finding]:
    """What the baseline's pilots showed: the concurrency it does not serve whole is the finding
    (not "too few samples"), and where the blocks were measured instead."""
    cut = [p for p in ev.pilots if p.incomplete]
    if not cut:
        return []
    first, last = ev.pilots[0], ev.pilots[-1]
    where = (
        f"performance was measured at concurrency {last.concurrency}, the highest it served whole"
        if not last.incomplete
        else f"it did not serve every answer whole even at concurrency {last.concurrency} "
        f"({last.incomplete} of {last.answers}); performance was measured there"
    )
    return [
        Finding(
            probe="load:pilot",
            category="baseline_concurrency",
            severity=Severity.MINOR,
            side="baseline",
            message=f"the baseline interrupts or truncates in-flight requests under concurrency "
            f"{first.concurrency} ({first.incomplete} of {first.answers} answers incomplete, "
            f"e.g. {first.example[:160]}): {where}",
        )
    ]


def evaluate(ev: PerformanceEvidence, policy: Policy, *, strict: bool = False) -> GateResult:
    """Judge the load run: latencies, throughput, errors, load checks, agreement under load."""
    b, c = (side_load(ev, name) for name in SIDES)
    r = side_load(ev, REPLICA) if ev.replica_url is not None else None
    looks = _Looks(len(look_schedule(ev.settings, policy)), ev.looks_stopped)
    _, judged = look_judgements(ev.blocks, ev.settings, policy, replica=r is not None)
    checks = [_latency(*spec, b, c, judged[spec[0]], policy, looks) for spec in LATENCIES]
    checks.append(_throughput(b, c, judged[THROUGHPUT], policy, looks))
    capacity = capacity_check(ev, policy)
    if capacity is not None:  # without an SLO the report shows why as evidence, not a check
        checks.append(capacity)
    checks += [_errors(b, c, policy), load_checks(ev, b, c, policy)]
    agreement, findings = agreement_under_load(ev, b, c, policy)
    checks.append(agreement)
    checks.append(early_divergence(ev, b, c, policy))
    findings += _regression_findings(checks)
    for s in (b, c) if r is None else (b, c, r):
        findings += _side_findings(ev, s)
    findings += _served_findings(ev)
    servers = {name: server_metrics(ev, name) for name in SIDES}
    metrics = _metrics((b, c) if r is None else (b, c, r)) | _server_values(servers)
    if ev.pilots:
        metrics["asked_concurrency"] = ev.pilots[0].concurrency
        metrics["measured_concurrency"] = ev.settings.concurrency
    details = _details(ev, b, r, policy, servers)
    return gate_result(
        NAME, checks, strict=strict, findings=findings, metrics=metrics, details=details
    )


def _regression_findings(checks: Sequence[Check]) -> list[Finding]:
    """A finding per failed check, with its ratio and interval (agreement under load has its
    own findings)."""
    return [
        Finding(
            probe=ch.row or ch.name,
            category="regression",
            severity=Severity.MAJOR,
            side="candidate",
            message=f"{ch.title}: {ch.reason}",
            baseline_excerpt=ch.baseline,
            candidate_excerpt=f"{ch.candidate} ({ch.ratio}"
            + (f", CI {ch.interval})" if ch.interval != "-" else ")"),
        )
        for ch in checks
        if ch.outcome is Outcome.FAIL and ch.name != "agreement_under_load"
    ]


def _side_findings(ev: PerformanceEvidence, s: SideLoad) -> list[Finding]:
    """What one side's load showed beside the checks: where servegate gave up on it (a hung
    block or capacity step) and a load generator that was the bottleneck."""
    findings = [
        Finding(probe="load", category="hung", severity=Severity.MAJOR, side=s.name, message=why)
        for why in ev.gave_up(s.name)
    ]
    findings += [
        Finding(
            probe=f"capacity:c{cap.concurrency}",
            category="hung",
            severity=Severity.MAJOR,
            side=s.name,
            message=f"every request of the capacity step at concurrency {cap.concurrency} "
            "timed out; no higher concurrency was sent",
        )
        for cap in ev.capacity
        if cap.side == s.name and cap.step is not None and all_timed_out(cap.step)
    ]
    if s.client_bound:
        findings.append(
            Finding(
                probe="load",
                category="client_bound",
                severity=Severity.MINOR,
                side=s.name,
                message="the load generator was the bottleneck (latencies may be inflated): "
                + "; ".join(s.client_bound[:3]),
            )
        )
    return findings


def _details(
    ev: PerformanceEvidence,
    b: SideLoad,
    r: SideLoad | None,
    policy: Policy,
    servers: Mapping[str, ServerMetrics | None],
) -> dict[str, Any]:
    """The evidence behind the checks: server gauges, settings, workload, blocks, the A/A
    floor, the capacity sweep and the served-concurrency pilots."""
    return {
        "server_metrics": {
            name: None if m is None else m.model_dump(mode="json") for name, m in servers.items()
        },
        "settings": ev.settings.model_dump(mode="json"),
        "workload": ev.workload.model_dump(mode="json"),
        "blocks": [_block_detail(blk) for blk in ev.blocks],
        "aa_floor": _floor_details(b, r, policy),
        "sequential": looks_details(ev, policy),
        "capacity": capacity_details(ev),
        "served_pilots": [
            {"concurrency": p.concurrency, "answers": p.answers, "incomplete": p.incomplete}
            for p in ev.pilots
        ],
    }
