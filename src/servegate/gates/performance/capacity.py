"""Capacity under an SLO: the highest concurrency each side served within it, compared.

Each side's sweep is read the way `servegate bench` reads its own (`load.sweep.sweep_limit` over
`evaluate_step` results): a step meets the SLO when at least ATTAINMENT of its requests met every
bound, failed requests counting as misses. Both sides climb the same concurrencies and stop after
their first missed step, so at most one step can show a regression: the candidate's first miss.
It fails only when the baseline met the SLO there and the candidate's share of requests meeting
it is both significantly lower (one-sided Fisher exact, `significance_alpha`) and lower by more
than `capacity_attainment_drop_max` (the effect-size band): a limit one step lower because of a
request or two, or of a burst of load on one side's step, is noise, not a regression. It is not
measured — never passed — when that step was client-bound on either side, has too few requests
to ever be significant, a side was sent no sweep because it hung earlier in the gate, or the
baseline met the SLO nowhere.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import comb

from servegate.config.models import Policy
from servegate.config.slo import SLO
from servegate.gates.performance.plan import SIDES, PerformanceEvidence, all_timed_out
from servegate.gates.performance.table import CAPACITY_ROW as ROW
from servegate.gates.performance.table import NO_SLO
from servegate.load.bench import evaluate_step
from servegate.load.result import StepResult
from servegate.load.sweep import ATTAINMENT, SweepLimit, meets_slo, sweep_limit
from servegate.stats.proportions import rate_increase
from servegate.verdict.judgement import check, not_measured
from servegate.verdict.model import Check

__all__ = ["SideSweep", "capacity_check", "capacity_details", "side_sweep"]

NAME = "capacity_under_slo"
TITLE = "max concurrency under SLO, candidate / baseline"


@dataclass(frozen=True)
class SideSweep:
    """One side's sweep as judged: its steps by concurrency, its limit, and why it was cut."""

    name: str
    tried: tuple[int, ...]  # the concurrencies of the sweep, sent or not
    steps: dict[int, StepResult]  # the steps sent, by concurrency
    limit: SweepLimit | None  # None: no step sent
    hung: str  # why the side was sent no sweep (hung before it), else ""
    timed_out: tuple[int, ...]  # concurrencies at which every request timed out

    def met(self, n: int) -> bool | None:
        step = self.steps.get(n)
        return None if step is None else meets_slo(step, ATTAINMENT)

    def first_miss(self) -> int | None:
        return next((n for n in sorted(self.steps) if self.met(n) is False), None)

    def cell(self) -> str:
        """The limit, then the attainment of every step: what a reader checks it against."""
        lim = self.limit
        if lim is None:
            head = "not measured" + (f" ({self.hung})" if self.hung else "")
        elif lim.best is None:
            head = f"none (< {self.tried[0]})"
        elif int(lim.best) == self.tried[-1]:
            head = f"≥ {int(lim.best)} (the highest tried)"
        else:
            head = str(int(lim.best))
        parts = []
        for n in self.tried:
            step = self.steps.get(n)
            if step is None:
                continue
            m = step.metrics
            verdict = "met" if self.met(n) else "missed"
            note = ", client-bound" if step.client.client_bound else ""
            note += ", every request timed out" if n in self.timed_out else ""
            parts.append(f"c{n} {m.slo_met}/{m.sent} {verdict}{note}")
        unsent = [n for n in self.tried if n not in self.steps]
        if parts and unsent:
            parts.append(f"not run above c{max(self.steps)}")
        return head + (f" ({'; '.join(parts)})" if parts else "")


def side_sweep(ev: PerformanceEvidence, name: str, slo: SLO) -> SideSweep:
    """One side's capacity steps, evaluated as `servegate bench` evaluates its own."""
    tried = ev.settings.capacity_concurrency
    mine = [s for s in ev.capacity if s.side == name]
    steps = {s.concurrency: evaluate_step(s.step, slo) for s in mine if s.step is not None}
    hung = next((s.not_sent for s in mine if s.step is None and s.hung and not steps), "")
    timed_out = tuple(s.concurrency for s in mine if s.step is not None and all_timed_out(s.step))
    limit = sweep_limit(list(steps.values()), ATTAINMENT) if steps else None
    return SideSweep(name, tried, steps, limit, hung, timed_out)


def _ratio(b: SideSweep, c: SideSweep) -> str:
    """Candidate limit / baseline limit; a limit at the highest tried is only a lower bound."""
    if b.limit is None or c.limit is None or b.limit.best is None or c.limit.best is None:
        return "-"
    top = b.tried[-1]
    b_low, c_low = b.limit.best == top, c.limit.best == top
    if b_low and c_low:
        return "-"  # both at least the highest tried: equal as far as the sweep can tell
    prefix = "≥ " if c_low else "≤ " if b_low else ""
    return f"{prefix}{c.limit.best / b.limit.best:.2f}×"


def _share(step: StepResult) -> str:
    m = step.metrics
    met = m.slo_met or 0
    return f"{met}/{m.sent} ({met / m.sent:.0%})" if m.sent else "0/0"


def capacity_check(ev: PerformanceEvidence, policy: Policy) -> Check | None:
    """The capacity check, or None without an SLO (the report then says why: NO_SLO)."""
    slo = ev.settings.slo
    if slo is None:
        return None
    b, c = (side_sweep(ev, name, slo) for name in SIDES)
    alpha, band = policy.significance_alpha, policy.capacity_attainment_drop_max
    limit = (
        f"wherever the baseline met the SLO ({slo.describe()}; ≥ {ATTAINMENT:.0%} of requests), "
        f"the candidate's share meeting it is not lower by more than {band:.0%} of requests "
        f"with one-sided Fisher exact p < {alpha:g}"
    )

    def measured(failed: bool, reason: str) -> Check:
        return check(
            NAME, TITLE, failed=failed, baseline=b.cell(), candidate=c.cell(), ratio=_ratio(b, c),
            limit=limit, policy_key="capacity_attainment_drop_max", row=ROW, reason=reason,
        )  # fmt: skip

    def unmeasured(why: str) -> Check:
        got = not_measured(NAME, TITLE, why, row=ROW)
        return got.model_copy(update={"baseline": b.cell(), "candidate": c.cell(), "limit": limit})

    for side in (b, c):
        if side.hung:
            return unmeasured(f"the {side.name} was sent no capacity step: {side.hung}")
        if not side.steps:
            return unmeasured(f"the {side.name} ran no capacity step")
    if not any(b.met(n) for n in b.steps):
        return unmeasured("the baseline met the SLO at no concurrency tried: nothing to compare")
    n = c.first_miss()
    if n is None:
        return measured(False, "the candidate met the SLO at every concurrency it was sent")
    bs, cs = b.steps.get(n), c.steps[n]
    if bs is None:
        return measured(
            False,
            f"the baseline missed the SLO first, at concurrency {b.first_miss()}; the candidate "
            f"met it there and missed it at {n}",
        )
    bound = [s.name for s, step in ((b, bs), (c, cs)) if step.client.client_bound]
    if bound:
        return unmeasured(
            f"the {' and the '.join(bound)} load generator was the bottleneck at concurrency {n}, "
            f"where the candidate missed the SLO: the miss may be the client's"
        )
    if not b.met(n):
        return measured(False, f"both sides missed the SLO at concurrency {n}")
    nb, nc = bs.metrics.sent, cs.metrics.sent
    floor_p = 1 / comb(nb + nc, nb) if nb and nc else 1.0
    inc = rate_increase(nb - (bs.metrics.slo_met or 0), nb, nc - (cs.metrics.slo_met or 0), nc)
    shares = f"candidate {_share(cs)} against the baseline's {_share(bs)}"
    drop = (bs.metrics.slo_met or 0) / nb - (cs.metrics.slo_met or 0) / nc
    if inc.p_value < alpha and drop > band:
        return measured(
            True,
            f"at concurrency {n} the baseline met the SLO and the candidate did not: requests "
            f"meeting it {shares}, one-sided Fisher exact p = {inc.p_value:.2g}",
        )
    if inc.p_value < alpha:
        return measured(
            False,
            f"the candidate missed the SLO at concurrency {n} where the baseline met it "
            f"({shares}, one-sided Fisher exact p = {inc.p_value:.2g}), but by {drop:.0%} of "
            f"requests, within capacity_attainment_drop_max ({band:.0%})",
        )
    if floor_p >= alpha:
        return unmeasured(
            f"too few requests at concurrency {n} ({nb} baseline, {nc} candidate) to show a "
            f"significant drop (smallest possible p {floor_p:.2g} ≥ {alpha:g}); raise "
            f"performance.capacity_requests"
        )
    return measured(
        False,
        f"the candidate missed the SLO at concurrency {n} where the baseline met it, but not "
        f"significantly ({shares}, one-sided Fisher exact p = {inc.p_value:.2g})",
    )


def capacity_details(ev: PerformanceEvidence) -> dict[str, object]:
    """The sweep for the JSON report: the SLO, and each side's limit and steps."""
    slo = ev.settings.slo
    if slo is None:
        return {"slo": None, "not_measured": NO_SLO}
    out: dict[str, object] = {"slo": slo.describe(), "attainment": ATTAINMENT}
    for name in SIDES:
        side = side_sweep(ev, name, slo)
        out[name] = {
            "limit": None if side.limit is None else side.limit.model_dump(mode="json"),
            "steps": [
                {
                    "concurrency": n,
                    "sent": step.metrics.sent,
                    "slo_met": step.metrics.slo_met,
                    "met": side.met(n),
                    "client_bound": step.client.client_bound,
                }
                for n, step in sorted(side.steps.items())
            ],
            "not_sent": [s.not_sent for s in ev.capacity if s.side == name and s.step is None],
        }
    return out
