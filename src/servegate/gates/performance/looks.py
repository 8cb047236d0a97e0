"""The performance gate's latency and throughput ratios at each planned look.

A ratio of block values (block P95s for a latency, block rates for throughput) is decided by its
exact interval (stats.shift_interval: the Hodges-Lehmann ratio and the bounds that invert the
one-sided Mann-Whitney U over blocks) against its band: a latency fails when the lower bound is
beyond the band, passes when the upper bound is within it, and is otherwise undecided;
throughput is the mirror image. The band is the policy's, widened by the baseline's own
deviation from its replica in the same blocks when there is one (the A/A floor,
`performance_aa_k`). The blocks run in planned looks (plan.look_blocks: 6, 8, 10, 12 a side by
default), each tested at the level an alpha-spending rule gives it (stats.sequential), so looking
early does not raise the false-alarm rate; a ratio keeps the decision of the first look that
decided it, and while a core latency or throughput is undecided another look runs (collect.py).
judgement.py turns these decisions into the gate's checks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from math import isfinite

from servegate.config.models import PerformanceConfig, Policy
from servegate.gates.performance.plan import (
    REPLICA,
    SIDES,
    Block,
    PerformanceEvidence,
    SideLoad,
    blocks_planned,
    look_blocks,
    side_load_of,
)
from servegate.stats.aa import deviation, widen_factor
from servegate.stats.bootstrap import RatioInterval, quantile_ratio_interval
from servegate.stats.distribution import DistributionSummary
from servegate.stats.sequential import Look, Spending, look_levels
from servegate.stats.shift_interval import ShiftInterval, ratio_interval

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


def times(value: float | None) -> str:
    """A ratio as the report prints it ("1.20×"; "-" when there is none)."""
    return "-" if value is None or not isfinite(value) else f"{value:.2f}×"


def _bootstrap(ci: RatioInterval) -> str:
    if ci.low is None or ci.high is None:
        return "-"
    high = "∞" if not isfinite(ci.high) else f"{ci.high:.2f}"
    return f"{ci.low:.2f}–{high}× ({ci.confidence:.0%})"


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
            f"A/A floor: replica / baseline {times(self.ratio)} (CI {ci}) in the same blocks, "
            f"limit widened {self.widen:.2f}× (performance_aa_k)"
        )

    def too_noisy(self, policy: Policy) -> str | None:
        """Why the metric cannot be judged: the baseline and its replica differ beyond
        `performance_aa_max`; None when they do not (or the floor was not measured)."""
        d = self.deviation
        if d is None or d <= policy.performance_aa_max:
            return None
        return (
            f"baseline and its replica differ by {times(self.ratio)} (d = {d:.2f}) in the same "
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


def looks_details(ev: PerformanceEvidence, policy: Policy) -> dict[str, object]:
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
