"""What checking a completion found: one outcome per assertion, one per probe."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class AssertionOutcome:
    """`applicable` is False when the assertion could not be judged (no baseline to compare with);
    such an outcome passes, so a baseline checked against itself is never failed by it."""

    type: str
    passed: bool
    message: str
    applicable: bool = True


@dataclass(frozen=True, slots=True)
class ProbeOutcome:
    probe: str
    outcomes: tuple[AssertionOutcome, ...]

    @property
    def passed(self) -> bool:
        return all(o.passed for o in self.outcomes)

    @property
    def failures(self) -> tuple[str, ...]:
        """`type: message` of each failed assertion, in suite order."""
        return tuple(f"{o.type}: {o.message}" for o in self.outcomes if not o.passed)
