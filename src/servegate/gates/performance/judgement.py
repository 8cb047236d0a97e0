"""How the performance gate judges: latency P95s, throughput, errors, and correctness under load.

Every metric is one `Check` (verdict/judgement.py). A latency or throughput shift fails only when it
is both significant (one-sided Mann-Whitney U below `significance_alpha`) and beyond its policy band
(stats.classification); the ratio's seeded bootstrap interval is shown beside it. The unit of every
comparison is the load block, not the request: requests of one block share the machine's state, so
one block disturbed by another process moves a block statistic once instead of making ten
"independent" slow requests (measured: clean vs clean on the reference engine failed 2 runs of 3
when latencies were tested per request, RESULTS.md). Too few samples is *not measured*, never a
pass: TTFT, E2EL and the error rate are core, so the gate is then inconclusive. With a baseline
replica measured in the same blocks, each limit widens by the baseline's own deviation from its
replica (the A/A floor, `performance_aa_k`): two identical processes on a shared machine can differ
for a whole run, and the candidate's ratio carries that difference too; beyond
`performance_aa_max` the widened limit has no teeth and the metric is not measured. Without one
the report says the floor is not measured. Answers under load
are checked twice: by the load checks (paired with the baseline's answer to the same request), and
against the same prompt answered alone, judged against the baseline's own disagreement (the noise
floor).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from math import isfinite
from typing import Any

from servegate.config.models import Policy
from servegate.gates.performance.capacity import capacity_check, capacity_details
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
from servegate.stats.aa import deviation, widen_factor
from servegate.stats.bootstrap import RatioInterval, quantile_ratio_interval
from servegate.stats.classification import Classification, MetricClassification, classify
from servegate.stats.distribution import DistributionSummary
from servegate.stats.mann_whitney import can_be_significant, smallest_p
from servegate.stats.proportions import rate_increase
from servegate.verdict.judgement import check, gate_result, not_measured
from servegate.verdict.model import Check, Finding, GateResult, MetricValue, Outcome, Severity

__all__ = ["evaluate"]

# Fixed seeds: the same samples give the same interval on any machine.
SEEDS = {"ttft_ms": 1, "tpot_ms": 2, "e2el_ms": 3, "output_tokens_per_s": 4}
AA_SEED_OFFSET = 10  # the A/A interval's seed: the metric's own + this
LATENCIES = (  # (metric, title, Performance Report row, core)
    ("ttft_ms", "TTFT P95, candidate / baseline", "TTFT P95", True),
    ("tpot_ms", "TPOT P95, candidate / baseline", "TPOT P95", False),
    ("e2el_ms", "E2EL P95, candidate / baseline", "E2EL P95", True),
)


def _x(value: float | None) -> str:
    return "-" if value is None or not isfinite(value) else f"{value:.2f}×"


def _interval(ci: RatioInterval) -> str:
    if ci.low is None or ci.high is None:
        return "-"
    high = "∞" if not isfinite(ci.high) else f"{ci.high:.2f}"
    return f"{ci.low:.2f}–{high}× ({ci.confidence:.0%})"


def _num(value: float | None, unit: str) -> str:
    return "-" if value is None else f"{value:.4g} {unit}"


def _reason(cls: MetricClassification, ci: RatioInterval, allowed: str) -> str:
    """What a reader needs of a failed ratio: the ratio, its interval, the band and the test."""
    if cls.classification is Classification.PASS:
        return cls.reason
    return (
        f"{_x(cls.ratio)} the baseline's (bootstrap CI {_interval(ci)}; {allowed}), "
        f"Mann-Whitney p = {cls.p_value:.2g}"
    )


def _too_few_blocks(nb: int, nc: int, alpha: float, change: str) -> str | None:
    """Why `nb` and `nc` blocks cannot show a significant change, or None when they can."""
    if can_be_significant(nb, nc, alpha):
        return None
    floor_p = smallest_p(nb, nc)
    return (
        f"{nb} baseline and {nc} candidate blocks cannot show a significant {change} "
        f"(smallest possible p {floor_p:.2g} ≥ {alpha:g}); run more blocks"
    )


@dataclass(frozen=True)
class AAFloor:
    """The baseline against its replica for one metric: how far one baseline process is from
    another in the same blocks, and the factor by which that widens the candidate's limit."""

    ratio: float | None  # replica / baseline of the compared statistic; None: not measured
    interval: RatioInterval | None
    widen: float  # 1 + k·d, d = max(r, 1/r) − 1; 1.0 when not measured
    why_not: str = ""  # why the floor is not measured

    @property
    def deviation(self) -> float | None:
        return deviation(self.ratio)

    def text(self) -> str:
        """What the report prints beside the limit."""
        if self.ratio is None:
            return f"A/A floor not measured ({self.why_not})"
        ci = "-" if self.interval is None else _interval(self.interval)
        return (
            f"A/A floor: replica / baseline {_x(self.ratio)} (CI {ci}) in the same blocks, "
            f"limit widened {self.widen:.2f}× (performance_aa_k)"
        )

    def too_noisy(self, policy: Policy) -> str | None:
        """Why the metric cannot be judged: the baseline and its replica differ beyond
        `performance_aa_max`; None when they do not (or the floor was not measured)."""
        d = self.deviation
        if d is None or d <= policy.performance_aa_max:
            return None
        return (
            f"baseline and its replica differ by {_x(self.ratio)} (d = {d:.2f}) in the same "
            f"blocks; the machine is too noisy to judge this metric (performance_aa_max "
            f"{policy.performance_aa_max:g})"
        )

    def details(self) -> dict[str, object]:
        ci = self.interval
        return {
            "ratio": self.ratio,
            "low": None if ci is None else ci.low,
            "high": None if ci is None else ci.high,
            "deviation": self.deviation,
            "widen": self.widen,
            "not_measured": self.why_not or None,
        }


NO_REPLICA = "no --baseline-replica"


def aa_floor(metric: str, b: Sequence[float], r: Sequence[float] | None, policy: Policy) -> AAFloor:
    """The A/A floor of one metric from the baseline's and the replica's block values (block
    P95s or block rates); not measured without a replica or with fewer than 2 blocks of it."""
    if r is None:
        return AAFloor(None, None, 1.0, NO_REPLICA)
    if len(b) < 2 or len(r) < 2:
        return AAFloor(None, None, 1.0, f"blocks: baseline {len(b)}, replica {len(r)}; need 2")
    med_b = DistributionSummary.from_values(b).p50
    med_r = DistributionSummary.from_values(r).p50
    assert med_b is not None
    assert med_r is not None
    if med_b <= 0 or med_r <= 0:
        return AAFloor(None, None, 1.0, "a median of 0 has no ratio")
    ratio = med_r / med_b
    ci = quantile_ratio_interval(
        b, r, quantile=0.5, seed=SEEDS[metric] + AA_SEED_OFFSET, min_samples=2
    )
    return AAFloor(ratio, ci, widen_factor(deviation(ratio), policy.performance_aa_k))


def _latency(
    metric: str,
    title: str,
    row: str,
    core: bool,
    b: SideLoad,
    c: SideLoad,
    r: SideLoad | None,
    policy: Policy,
) -> Check:
    """Judged per block, the unit that is independent: requests of one block share the
    machine's state (another process on a shared core slows all of them), so a test over
    requests would call one disturbed block significant. The ratio is of the median block P95,
    the test a Mann-Whitney U over block P95s, the interval a bootstrap over blocks."""
    bv, cv = b.values(metric), c.values(metric)
    allowed, alpha = policy.p95_latency_regression_max, policy.significance_alpha
    n = policy.performance_min_samples
    if len(bv) < n or len(cv) < n:
        why = f"too few samples: baseline {len(bv)}, candidate {len(cv)} (need {n} each)"
        return not_measured(metric, title, why, core=core, row=row)
    bb, cb = b.block_p95s(metric), c.block_p95s(metric)
    few = _too_few_blocks(len(bb), len(cb), alpha, "rise")
    if few is not None:
        return not_measured(metric, title, few, core=core, row=row)
    floor = aa_floor(metric, bb, None if r is None else r.block_p95s(metric), policy)
    noisy = floor.too_noisy(policy)
    if noisy is not None:
        return not_measured(metric, title, noisy, core=core, row=row)
    widened = (1 + allowed) * floor.widen - 1
    cls = classify(
        metric,
        bb,
        cb,
        direction="increase",
        allowed_increase=widened,
        statistic="p50",
        alpha=alpha,
        min_samples=2,
    )
    ci = quantile_ratio_interval(bb, cb, quantile=0.5, seed=SEEDS[metric], min_samples=2)
    failed = cls.classification is Classification.HIGH
    pooled = (DistributionSummary.from_values(v).p95 for v in (bv, cv))
    block = (DistributionSummary.from_values(v).p50 for v in (bb, cb))
    return check(
        metric,
        title,
        failed=failed,
        baseline=f"{_num(next(pooled), 'ms')} (median block {_num(next(block), 'ms')})",
        candidate=f"{_num(next(pooled), 'ms')} (median block {_num(next(block), 'ms')})",
        ratio=_x(cls.ratio),
        interval=_interval(ci),
        limit=f"median block P95 ≤ {_band(1 + allowed, floor)} unless not significant "
        f"(p < {alpha:g}); {floor.text()}",
        policy_key="p95_latency_regression_max",
        core=core,
        row=row,
        reason="median block P95: "
        + _reason(cls, ci, f"allowed {_band(1 + allowed, floor)}")
        + _inside_floor(cls, 1 + allowed, floor, alpha),
    )


def _band(limit: float, floor: AAFloor) -> str:
    """The policy's limit, and what the A/A floor widened it to."""
    if floor.ratio is None:
        return f"{limit:.2f}×"
    if limit >= 1:
        return f"{limit:.2f}× × A/A {floor.widen:.2f} = {limit * floor.widen:.2f}×"
    return f"{limit:.2f}× ÷ A/A {floor.widen:.2f} = {limit / floor.widen:.2f}×"


def _inside_floor(cls: MetricClassification, limit: float, floor: AAFloor, alpha: float) -> str:
    """Said when a ratio beyond the policy's own limit passed only because of the A/A floor
    (significant, so the test alone would not have passed it)."""
    ratio, p = cls.ratio, cls.p_value
    if cls.classification is not Classification.PASS or ratio is None or floor.ratio is None:
        return ""
    if p is None or p >= alpha:
        return ""
    beyond = ratio > limit if limit >= 1 else ratio < limit
    if not beyond:
        return ""
    return (
        f"; beyond {limit:.2f}× but inside the A/A floor (the replica is "
        f"{_x(floor.ratio)} the baseline in the same blocks)"
    )


def _throughput(b: SideLoad, c: SideLoad, r: SideLoad | None, policy: Policy) -> Check:
    metric, title, row = (
        "output_tokens_per_s",
        "output tokens/s, candidate / baseline",
        "throughput",
    )
    bv, cv = b.block_rates, c.block_rates
    alpha, allowed = policy.significance_alpha, policy.throughput_drop_max
    few = _too_few_blocks(len(bv), len(cv), alpha, "drop")
    if few is not None:
        return not_measured(metric, title, few, row=row)
    floor = aa_floor(metric, bv, None if r is None else r.block_rates, policy)
    noisy = floor.too_noisy(policy)
    if noisy is not None:
        return not_measured(metric, title, noisy, row=row)
    widened = 1 - (1 - allowed) / floor.widen
    cls = classify(
        metric,
        bv,
        cv,
        direction="decrease",
        allowed_decrease=widened,
        statistic="p50",
        alpha=alpha,
        min_samples=2,
    )
    ci = quantile_ratio_interval(bv, cv, quantile=0.5, seed=SEEDS[metric], min_samples=2)
    med = (DistributionSummary.from_values(v).p50 for v in (bv, cv))
    return check(
        metric,
        title,
        failed=cls.classification is Classification.LOW,
        baseline=_num(next(med), "tok/s"),
        candidate=_num(next(med), "tok/s"),
        ratio=_x(cls.ratio),
        interval=_interval(ci),
        limit=f"≥ {_band(1 - allowed, floor)} unless not significant (p < {alpha:g}); "
        + floor.text(),
        policy_key="throughput_drop_max",
        row=row,
        reason="median block: "
        + _reason(cls, ci, f"allowed {_band(1 - allowed, floor)}")
        + _inside_floor(cls, 1 - allowed, floor, alpha),
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
    checks = [_latency(*spec, b, c, r, policy) for spec in LATENCIES]
    checks.append(_throughput(b, c, r, policy))
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
        "capacity": capacity_details(ev),
        "served_pilots": [
            {"concurrency": p.concurrency, "answers": p.answers, "incomplete": p.incomplete}
            for p in ev.pilots
        ],
    }
