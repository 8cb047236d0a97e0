"""How the performance gate judges: latency P95s, throughput, errors, and correctness under load.

Every metric is one `Check` (verdict/judgement.py). A latency or throughput ratio is judged by its
interval (stats.shift_interval): the Hodges-Lehmann ratio of block values candidate / baseline and
its exact bounds, which invert the one-sided Mann-Whitney U over blocks, so the interval shown and
the test that decides cannot disagree. A latency **fails** when the interval's lower bound is
beyond its band (every ratio the data leave possible is a slowdown beyond it), **passes** when its
upper bound is within it, and is otherwise **undecided**; throughput is the mirror image. The
blocks run in planned looks (plan.look_blocks: 6, 8, 10, 12 a side by default); each look tests
at the level an alpha-spending rule gives it (stats.sequential), so looking early does not raise
the false-alarm rate, and while TTFT, E2EL or throughput is undecided another look runs
(collect.py). Undecided at the last look is *not measured*, with the interval, band, blocks and
look in the reason: TTFT and E2EL are core, so the gate is then inconclusive. Every look is in the
details (`sequential`). The unit of every comparison is the load block, not the request: requests
of one block share the machine's state, so one block disturbed by another process moves a block
statistic once instead of making ten "independent" slow requests (measured: clean vs clean on the
reference engine failed 2 runs of 3 when latencies were tested per request, RESULTS.md). Too few
samples is *not measured*, never a pass. With a baseline replica measured in the same blocks,
each band widens by the baseline's own deviation from its replica (the A/A floor,
`performance_aa_k`): two identical processes on a shared machine can differ for a whole run, and
the candidate's ratio carries that difference too; beyond `performance_aa_max` the widened band
has no teeth and the metric is not measured. Without one the report says the floor is not
measured. Answers under load are checked twice: by the load checks (paired with the baseline's
answer to the same request), and against the same prompt answered alone, judged against the
baseline's own disagreement (the noise floor).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from math import isfinite
from typing import Any

from servegate.config.models import PerformanceConfig, Policy
from servegate.gates.performance.capacity import capacity_check, capacity_details
from servegate.gates.performance.plan import (
    NAME,
    REPLICA,
    SIDES,
    Block,
    PerformanceEvidence,
    SideLoad,
    all_timed_out,
    blocks_planned,
    look_blocks,
    side_load,
    side_load_of,
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
from servegate.stats.distribution import DistributionSummary
from servegate.stats.mann_whitney import smallest_p
from servegate.stats.proportions import rate_increase
from servegate.stats.sequential import Look, Spending, look_levels
from servegate.stats.shift_interval import ShiftInterval, ratio_interval
from servegate.verdict.judgement import check, gate_result, not_measured
from servegate.verdict.model import Check, Finding, GateResult, MetricValue, Outcome, Severity

__all__ = ["evaluate", "look_judgements", "undecided"]

# Fixed seeds: the same samples give the same interval on any machine.
SEEDS = {"ttft_ms": 1, "tpot_ms": 2, "e2el_ms": 3, "output_tokens_per_s": 4}
AA_SEED_OFFSET = 10  # the A/A interval's seed: the metric's own + this
THROUGHPUT = "output_tokens_per_s"
# How the one-sided significance_alpha is spent over the planned looks (stats.sequential):
# Pocock-type spends most at the first look, where the gate is meant to stop when it can.
SPENDING: Spending = "pocock"
LATENCIES = (  # (metric, title, Performance Report row, core)
    ("ttft_ms", "TTFT P95, candidate / baseline", "TTFT P95", True),
    ("tpot_ms", "TPOT P95, candidate / baseline", "TPOT P95", False),
    ("e2el_ms", "E2EL P95, candidate / baseline", "E2EL P95", True),
)


def _x(value: float | None) -> str:
    return "-" if value is None or not isfinite(value) else f"{value:.2f}×"


def _bootstrap(ci: RatioInterval) -> str:
    if ci.low is None or ci.high is None:
        return "-"
    high = "∞" if not isfinite(ci.high) else f"{ci.high:.2f}"
    return f"{ci.low:.2f}–{high}× ({ci.confidence:.0%})"


def _num(value: float | None, unit: str) -> str:
    return "-" if value is None else f"{value:.4g} {unit}"


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
        ci = "-" if self.interval is None else _bootstrap(self.interval)
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


def _too_few_blocks(nb: int, nc: int, level: float, change: str) -> str:
    """Why `nb` and `nc` blocks cannot bound a ratio at `level`."""
    return (
        f"{nb} baseline and {nc} candidate blocks cannot show a significant {change} "
        f"(smallest possible p {smallest_p(nb, nc):.2g} ≥ {level:.2g}); run more blocks"
    )


def look_schedule(settings: PerformanceConfig, policy: Policy) -> tuple[Look, ...]:
    """The planned looks (blocks a side each) and the one-sided level of each: the sequential
    design the latency and throughput checks are judged by."""
    return look_levels(policy.significance_alpha, look_blocks(settings), SPENDING)


def look_at(looks: Sequence[Look], planned: int) -> Look:
    """The look that `planned` blocks a side complete: the last one with at most that many (the
    first one when there are fewer)."""
    done = [x for x in looks if x.blocks <= planned]
    return done[-1] if done else looks[0]


@dataclass(frozen=True)
class RatioJudgement:
    """One latency or throughput check at one look: the band, the exact interval of the ratio at
    the look's level and what it decides ("fail", "pass", "undecided" or "not measured")."""

    metric: str
    look: Look
    decision: str
    why: str = ""  # why not measured (before any interval)
    floor: AAFloor | None = None
    band: float | None = None
    interval: ShiftInterval | None = None
    increase: bool = True  # the bad direction: up (latency) or down (throughput)

    def details(self) -> dict[str, object]:
        ci = self.interval
        return {
            "decision": self.decision,
            "ratio": None if ci is None else ci.estimate,
            "low": None if ci is None or not ci.bounded else ci.low,
            "high": None if ci is None or not ci.bounded else ci.high,
            "band": self.band,
            "not_measured": self.why or None,
        }


def _beyond(value: float, band: float, *, increase: bool) -> bool:
    """A ratio on the bad side of the band: above it for a latency, below it for throughput."""
    return value > band if increase else value < band


def judge_ratio(
    metric: str,
    b: Sequence[float],
    c: Sequence[float],
    r: Sequence[float] | None,
    policy: Policy,
    look: Look,
    *,
    increase: bool,
) -> RatioJudgement:
    """Decide one ratio of block values (P95s or throughputs) at `look`: fail when the bound on
    the bad side is beyond the band, pass when the other bound is within it, else undecided."""
    floor = aa_floor(metric, b, r, policy)
    noisy = floor.too_noisy(policy)
    if noisy is not None:
        return RatioJudgement(metric, look, "not measured", noisy, floor)
    if len(b) < 1 or len(c) < 1:
        why = f"blocks measured: baseline {len(b)}, candidate {len(c)}"
        return RatioJudgement(metric, look, "not measured", why, floor)
    if min(b) <= 0 or min(c) <= 0:
        return RatioJudgement(metric, look, "not measured", "a block of 0 has no ratio", floor)
    if increase:
        band = (1 + policy.p95_latency_regression_max) * floor.widen
    else:
        band = (1 - policy.throughput_drop_max) / floor.widen
    ci = ratio_interval(b, c, look.level)
    bad, good = (ci.low, ci.high) if increase else (ci.high, ci.low)
    if ci.bounded and _beyond(bad, band, increase=increase):
        decision = "fail"
    elif ci.bounded and not _beyond(good, band, increase=increase):
        decision = "pass"
    else:
        decision = "undecided"
    return RatioJudgement(metric, look, decision, "", floor, band, ci, increase)


def _interval(ci: ShiftInterval | None) -> str:
    if ci is None:
        return "-"
    high = "∞" if not isfinite(ci.high) else f"{ci.high:.2f}"
    return f"{ci.low:.2f}–{high}× ({ci.confidence:.1%})"


def _decided_by(j: RatioJudgement, looks: int, limit: float) -> str:
    """The reason of a decided or undecided ratio: which bound decided and why, the test it
    is equivalent to and the look."""
    ci, band = j.interval, j.band
    assert ci is not None
    assert band is not None
    look = j.look
    at = (
        f"look {look.number} of {looks}, {look.blocks} blocks a side, "
        f"one-sided level {look.level:.2g}"
    )
    side, word = ("greater", "slowdown") if j.increase else ("less", "drop")
    beyond, within = (">", "≤") if j.increase else ("<", "≥")
    p = ci.p_value(side)
    test = f"Mann-Whitney one-sided p = {p:.2g}"
    shown = f"ratio {_x(ci.estimate)}, interval {_interval(ci)}"
    if j.decision == "fail":
        bound = "lower" if j.increase else "upper"
        value = ci.low if j.increase else ci.high
        return (
            f"{bound} bound {_x(value)} {beyond} band {band:.2f}×: the {word} is beyond the band "
            f"({shown}; {test} ≤ {look.level:.2g}; {at})"
        )
    if j.decision == "pass":
        bound = "upper" if j.increase else "lower"
        value = ci.high if j.increase else ci.low
        text = (
            f"{bound} bound {_x(value)} {within} band {band:.2f}×: any {word} is within the band "
            f"({shown}; {at})"
        )
        floor = j.floor
        own = value > limit if j.increase else value < limit
        if floor is not None and floor.ratio is not None and own:
            text += (
                f"; beyond {limit:.2f}× but inside the A/A floor (the replica is "
                f"{_x(floor.ratio)} the baseline in the same blocks)"
            )
        return text
    if not ci.bounded:
        change = "rise" if j.increase else "drop"
        return _too_few_blocks(ci.n_baseline, ci.n_candidate, look.level, change)
    if look.number < looks:
        return (
            f"undecided when the blocks stopped: interval {_interval(ci)} holds the band "
            f"{band:.2f}× (ratio {_x(ci.estimate)}; {test}; {at}); no later look ran (another "
            "latency or throughput had failed, or a side stopped answering)"
        )
    return (
        f"undecided at the most blocks: interval {_interval(ci)} holds the band {band:.2f}×, "
        f"so neither a {word} beyond it nor one within it is shown (ratio {_x(ci.estimate)}; "
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
    looks: int,
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
        ratio="-" if ci is None else _x(ci.estimate),
        interval=_interval(ci),
        limit=f"block P95 ratio ≤ {_band(1 + allowed, j.floor)}: fails when the interval's "
        f"lower bound is beyond, passes when its upper bound is within; {j.floor.text()}",
        policy_key="p95_latency_regression_max",
        core=core,
        row=row,
        reason="block P95s: " + _decided_by(j, looks, 1 + allowed),
    )


def judge_latency(
    metric: str, b: SideLoad, c: SideLoad, r: SideLoad | None, policy: Policy, look: Look
) -> RatioJudgement:
    """One latency's block P95s at `look` (the request count is checked by the caller)."""
    rv = None if r is None else r.block_p95s(metric)
    return judge_ratio(
        metric, b.block_p95s(metric), c.block_p95s(metric), rv, policy, look, increase=True
    )


def judge_throughput(
    b: SideLoad, c: SideLoad, r: SideLoad | None, policy: Policy, look: Look
) -> RatioJudgement:
    """Output throughput's block rates at `look`."""
    rv = None if r is None else r.block_rates
    return judge_ratio(THROUGHPUT, b.block_rates, c.block_rates, rv, policy, look, increase=False)


def _band(limit: float, floor: AAFloor) -> str:
    """The policy's limit, and what the A/A floor widened it to."""
    if floor.ratio is None:
        return f"{limit:.2f}×"
    if limit >= 1:
        return f"{limit:.2f}× × A/A {floor.widen:.2f} = {limit * floor.widen:.2f}×"
    return f"{limit:.2f}× ÷ A/A {floor.widen:.2f} = {limit / floor.widen:.2f}×"


def _throughput(b: SideLoad, c: SideLoad, j: RatioJudgement, policy: Policy, looks: int) -> Check:
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
        ratio="-" if ci is None else _x(ci.estimate),
        interval=_interval(ci),
        limit=f"block throughput ratio ≥ {_band(1 - allowed, j.floor)}: fails when the "
        f"interval's upper bound is beyond, passes when its lower bound is within; "
        + j.floor.text(),
        policy_key="throughput_drop_max",
        row=row,
        reason="block throughputs: " + _decided_by(j, looks, 1 - allowed),
    )


# The checks whose undecided interval runs another look: the core latencies and throughput.
SEQUENTIAL = ("ttft_ms", "e2el_ms", "output_tokens_per_s")


def _each_look(
    blocks: Sequence[Block], settings: PerformanceConfig, policy: Policy, *, replica: bool
) -> list[tuple[Look, dict[str, RatioJudgement]]]:
    """Every look `blocks` reached, each ratio judged on the blocks run by then."""
    looks = look_schedule(settings, policy)
    last = look_at(looks, blocks_planned(blocks))
    out = []
    for look in looks[: last.number]:
        prefix = [blk for blk in blocks if blk.number < look.blocks]
        b, c = (side_load_of(prefix, name) for name in SIDES)
        r = side_load_of(prefix, REPLICA) if replica else None
        judged = {m: judge_latency(m, b, c, r, policy, look) for m, *_ in LATENCIES}
        judged[THROUGHPUT] = judge_throughput(b, c, r, policy, look)
        out.append((look, judged))
    return out


def _standing(seen: Sequence[tuple[Look, dict[str, RatioJudgement]]]) -> dict[str, RatioJudgement]:
    """Each ratio's judgement as it stands: the first look that decided it (fail or pass: a
    check stops at its boundary, and later looks run only for the checks still open), else the
    last look's."""
    out: dict[str, RatioJudgement] = {}
    for _, judged in seen:
        for metric, j in judged.items():
            if metric not in out or out[metric].decision not in ("fail", "pass"):
                out[metric] = j
    return out


def look_judgements(
    blocks: Sequence[Block], settings: PerformanceConfig, policy: Policy, *, replica: bool
) -> tuple[Look, dict[str, RatioJudgement]]:
    """The look `blocks` complete and each latency's and throughput's judgement as it stands
    then: what decides whether the gate runs another look, and what `evaluate` reports."""
    seen = _each_look(blocks, settings, policy, replica=replica)
    return seen[-1][0], _standing(seen)


def undecided(
    blocks: Sequence[Block], settings: PerformanceConfig, policy: Policy, *, replica: bool
) -> list[str]:
    """The core latencies and throughput no look has decided after `blocks`, for which another
    look runs (unless this was the last); none once a latency or throughput has failed: the
    gate fails whatever the open ones would show, so more blocks cannot change the verdict."""
    _, judged = look_judgements(blocks, settings, policy, replica=replica)
    if any(j.decision == "fail" for j in judged.values()):
        return []
    return [m for m in SEQUENTIAL if judged[m].decision == "undecided"]


def _looks_details(ev: PerformanceEvidence, policy: Policy) -> dict[str, object]:
    """Every look the run made: its blocks, level and each ratio's interval and decision at it,
    and the look that decided each ratio, so a reader can check why the blocks stopped where
    they did."""
    looks = look_schedule(ev.settings, policy)
    seen = _each_look(ev.blocks, ev.settings, policy, replica=ev.replica_url is not None)
    out = [
        {
            "look": look.number,
            "blocks": look.blocks,
            "level": look.level,
            "attained": look.attained,
            "checks": {m: j.details() for m, j in judged.items()},
        }
        for look, judged in seen
    ]
    return {
        "spending": SPENDING,
        "alpha": policy.significance_alpha,
        "planned_blocks": [x.blocks for x in looks],
        "looks": out,
        "decided_at": {m: j.look.number for m, j in _standing(seen).items()},
    }


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
    looks = len(look_schedule(ev.settings, policy))
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
        "sequential": _looks_details(ev, policy),
        "capacity": capacity_details(ev),
        "served_pilots": [
            {"concurrency": p.concurrency, "answers": p.answers, "incomplete": p.incomplete}
            for p in ev.pilots
        ],
    }
