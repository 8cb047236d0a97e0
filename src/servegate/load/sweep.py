"""The capacity a sweep found: the highest concurrency (or request rate) that still met the SLOs.

A step meets the SLOs when at least `attainment` of the requests it sent met every bound
(errors and timeouts count as misses): with the default 0.95 that is the P95 reading of an SLO,
as a latency target is usually stated. Steps are compared by their setting, not their order, and
the answer says what the sweep cannot: that the limit lies between two settings tried, at or
above the highest one when even that one met the SLOs, and whether the client was the
bottleneck of a step that missed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:
    from servegate.load.result import StepResult

__all__ = ["ATTAINMENT", "SweepLimit", "meets_slo", "sweep_limit"]

ATTAINMENT = 0.95
DEFINITION = (
    "highest setting whose step met the SLOs: at least {share:.0%} of the requests it sent met "
    "every bound (failed requests count as misses)"
)


class SweepLimit(BaseModel):
    """The highest setting of a sweep that met the SLOs, and how far that answer goes."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    definition: str
    attainment: float = Field(gt=0, le=1)
    setting: Literal["concurrency", "rate_rps"]
    best: float | None  # None: no step met the SLOs
    best_label: str | None
    met: tuple[str, ...]  # labels of the steps that met the SLOs
    missed: tuple[str, ...]
    note: str

    def describe(self) -> str:
        """One line: the limit found, and what bounds it."""
        what = "concurrency" if self.setting == "concurrency" else "request rate"
        if self.best_label is None:
            return f"max {what} under SLO: none of the steps met it ({self.note})"
        return f"max {what} under SLO: {self.best_label} ({self.note})"


def meets_slo(step: StepResult, attainment: float = ATTAINMENT) -> bool | None:
    """Whether one step met the SLOs; None when it has no SLO count or sent nothing."""
    m = step.metrics
    if m.slo_met is None or m.sent == 0:
        return None
    return m.slo_met >= attainment * m.sent


def _setting(step: StepResult) -> float | None:
    a = step.arrival
    if a.kind == "closed":
        return None if a.concurrency is None else float(a.concurrency)
    if a.kind in ("poisson", "gamma"):
        return a.rate_rps
    return None


def sweep_limit(steps: Sequence[StepResult], attainment: float = ATTAINMENT) -> SweepLimit | None:
    """The highest concurrency (closed loop) or rate (open loop) meeting the SLOs; None without
    an SLO or without a closed- or open-loop step."""
    judged = [
        (setting, step, ok)
        for step in steps
        if (setting := _setting(step)) is not None
        and (ok := meets_slo(step, attainment)) is not None
    ]
    if not judged:
        return None
    kind: Literal["concurrency", "rate_rps"] = (
        "concurrency" if judged[0][1].arrival.kind == "closed" else "rate_rps"
    )
    judged.sort(key=lambda t: t[0])
    met = [(s, step) for s, step, ok in judged if ok]
    missed = [(s, step) for s, step, ok in judged if not ok]
    best = met[-1] if met else None
    if best is None:
        note = f"the lowest setting tried, {judged[0][1].label}, already missed"
    else:
        above = [(s, step) for s, step in missed if s > best[0]]
        if not above:
            note = "the highest setting tried; the limit may be higher"
        else:
            note = f"{above[0][1].label} missed"
            if any(s < best[0] for s, _ in missed):
                note += "; a lower setting also missed, so the curve is not monotone (noise?)"
    bound = [step.label for _, step in missed if step.client.client_bound]
    if bound:
        note += f"; client-bound at {', '.join(bound)}: the limit may be the client's"
    return SweepLimit(
        definition=DEFINITION.format(share=attainment),
        attainment=attainment,
        setting=kind,
        best=None if best is None else best[0],
        best_label=None if best is None else best[1].label,
        met=tuple(step.label for _, step in met),
        missed=tuple(step.label for _, step in missed),
        note=note,
    )
