"""The canary's plan from the command line: `--steps 1,10,50,100 --interval 60s`."""

from __future__ import annotations

import math
from dataclasses import dataclass

from servegate.config.durations import duration_seconds


class CanaryPlanError(ValueError):
    """A bad --steps or --interval: one line naming the input (exit 2)."""

    exit_code = 2


@dataclass(frozen=True)
class CanaryPlan:
    """Weights in percent of routable requests, strictly increasing, ending at 100; the length
    of one judged interval."""

    steps: tuple[float, ...]
    interval_s: float

    def __post_init__(self) -> None:
        if not self.steps:
            raise CanaryPlanError("--steps: give at least one step, e.g. 1,10,50,100")
        if any(not 0 < s <= 100 or not math.isfinite(s) for s in self.steps):
            raise CanaryPlanError(f"--steps {_show(self.steps)}: each step must be in (0, 100]")
        if any(b <= a for a, b in zip(self.steps, self.steps[1:], strict=False)):
            raise CanaryPlanError(f"--steps {_show(self.steps)}: steps must strictly increase")
        if self.steps[-1] != 100:
            raise CanaryPlanError(
                f"--steps {_show(self.steps)}: the last step must be 100 (full promotion)"
            )
        if len(self.steps) < 2:
            raise CanaryPlanError(
                f"--steps {_show(self.steps)}: give at least one step below 100 to judge at"
            )
        if not (math.isfinite(self.interval_s) and self.interval_s > 0):
            raise CanaryPlanError(f"--interval {self.interval_s:g}: must be a positive duration")


def _show(steps: tuple[float, ...]) -> str:
    return ",".join(f"{s:g}" for s in steps)


def parse_steps(text: str) -> tuple[float, ...]:
    """`1,10,50,100` → (1.0, 10.0, 50.0, 100.0); the plan checks the values."""
    parts = [p.strip().removesuffix("%") for p in text.split(",")]
    try:
        steps = tuple(float(p) for p in parts)
    except ValueError:
        raise CanaryPlanError(
            f"--steps {text!r}: not a comma-separated list of percentages (e.g. 1,10,50,100)"
        ) from None
    return steps


def parse_interval(text: str) -> float:
    """`60s`, `2m`, `500ms`, `1h` or a number of seconds → seconds."""
    seconds = duration_seconds(text)
    if seconds is None:
        raise CanaryPlanError(f"--interval {text!r}: not a duration (e.g. 60s, 2m, 500ms)")
    if seconds <= 0:
        raise CanaryPlanError(f"--interval {text!r}: must be longer than 0")
    return seconds


def parse_plan(steps: str, interval: str) -> CanaryPlan:
    """The plan from the two options' text."""
    return CanaryPlan(parse_steps(steps), parse_interval(interval))
