"""The one decision rule: every metric is classified once, every gate is one aggregation of those.

Kayenta's judge is the model. A gate turns its evidence into `Check`s — each a metric with its
value, its limit (a policy key with a unit) and one of four outcomes: pass, fail, *not
measured* or *not applicable* (each of the last two with the reason). `judge` aggregates checks
into PASS / FAIL / INCONCLUSIVE the same way for every gate, and the Correctness Report table
reuses the same checks. Nothing that was not measured can become a pass: a gate whose core
measurement is missing is inconclusive, and
`strict` makes any gap inconclusive.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from servegate.verdict.model import (
    Check,
    Divergence,
    Finding,
    GateResult,
    MetricValue,
    Outcome,
    Status,
)


def check(
    name: str,
    title: str,
    *,
    failed: bool | None,
    candidate: str = "-",
    baseline: str = "-",
    limit: str = "-",
    policy_key: str | None = None,
    core: bool = False,
    reason: str = "",
    row: str | None = None,
    ratio: str = "-",
    interval: str = "-",
) -> Check:
    """A check from a comparison already made: `failed` None means it could not be measured."""
    outcome = Outcome.NOT_MEASURED if failed is None else Outcome.FAIL if failed else Outcome.PASS
    return Check(
        name=name,
        title=title,
        outcome=outcome,
        candidate=candidate,
        baseline=baseline,
        limit=limit,
        policy_key=policy_key,
        core=core,
        reason=reason,
        row=row,
        ratio=ratio,
        interval=interval,
    )


def not_measured(
    name: str, title: str, reason: str, *, core: bool = False, row: str | None = None
) -> Check:
    """A check that could not be made, and why."""
    return check(name, title, failed=None, core=core, reason=reason, row=row)


def not_applicable(name: str, title: str, reason: str, *, row: str | None = None) -> Check:
    """A check the servers give nothing to make it with (the feature is not offered at all):
    listed with its reason; it never passes and never blocks, `strict` included."""
    return Check(name=name, title=title, outcome=Outcome.NOT_APPLICABLE, reason=reason, row=row)


def at_most(
    name: str,
    title: str,
    value: float | None,
    limit: float | None,
    *,
    unit: str,
    policy_key: str | None = None,
    baseline: str = "-",
    limit_text: str | None = None,
    core: bool = False,
    why_missing: str = "not measured",
    row: str | None = None,
    fmt: str = ".4g",
) -> Check:
    """`value` must not exceed `limit`; either missing means not measured."""
    if value is None or limit is None:
        return not_measured(name, title, why_missing, core=core, row=row)
    shown = f"{value:{fmt}} {unit}".strip()
    bound = limit_text or f"≤ {limit:{fmt}} {unit}".strip()
    return check(
        name,
        title,
        failed=value > limit,
        candidate=shown,
        baseline=baseline,
        limit=bound,
        policy_key=policy_key,
        core=core,
        row=row,
        reason=f"{shown} exceeds {bound}" if value > limit else "",
    )


def combine(checks: Sequence[Check]) -> Outcome:
    """Several checks read as one: any failure fails; nothing measured is not measured."""
    if any(c.outcome is Outcome.FAIL for c in checks):
        return Outcome.FAIL
    if not any(c.measured for c in checks):
        applicable = [c for c in checks if c.applicable]
        return Outcome.NOT_APPLICABLE if checks and not applicable else Outcome.NOT_MEASURED
    return Outcome.PASS


STATUS_OF = {
    Outcome.PASS: Status.PASS,
    Outcome.FAIL: Status.FAIL,
    Outcome.NOT_MEASURED: Status.INCONCLUSIVE,
    Outcome.NOT_APPLICABLE: Status.SKIP,
}


def judge(checks: Sequence[Check], *, strict: bool = False) -> tuple[Status, str]:
    """The gate's status and a one-line reason: fail > not measured > pass.

    FAIL when any check failed; INCONCLUSIVE when a core check (or, with `strict`, any check)
    was not measured, or when nothing was measured at all; SKIP when every check is not
    applicable (the servers offer nothing it could measure); PASS otherwise. A not-applicable
    check is never a gap, `strict` included.
    """
    failed = [c for c in checks if c.outcome is Outcome.FAIL]
    if failed:
        return Status.FAIL, "; ".join(_why(c) for c in failed[:3])
    gaps = [c for c in checks if c.outcome is Outcome.NOT_MEASURED and (c.core or strict)]
    if gaps:
        return Status.INCONCLUSIVE, "not measured: " + "; ".join(_why(c) for c in gaps[:3])
    if checks and all(c.outcome is Outcome.NOT_APPLICABLE for c in checks):
        return Status.SKIP, "not applicable: " + "; ".join(_why(c) for c in checks[:3])
    if not any(c.measured for c in checks):
        return Status.INCONCLUSIVE, "nothing could be measured"
    passed = sum(1 for c in checks if c.outcome is Outcome.PASS)
    missing = sum(1 for c in checks if c.outcome is Outcome.NOT_MEASURED)
    offered = sum(1 for c in checks if c.outcome is Outcome.NOT_APPLICABLE)
    tail = f"; {missing} not measured (listed)" if missing else ""
    tail += f"; {offered} not applicable (listed)" if offered else ""
    return Status.PASS, f"{passed} check(s) within their limits{tail}"


def gate_result(
    name: str,
    checks: Sequence[Check],
    *,
    strict: bool = False,
    findings: Sequence[Finding] = (),
    divergences: Sequence[Divergence] = (),
    metrics: Mapping[str, MetricValue] | None = None,
    details: Mapping[str, Any] | None = None,
) -> GateResult:
    """A gate's result, judged by `judge`: every gate builds its result here."""
    status, summary = judge(checks, strict=strict)
    return GateResult(
        name=name,
        status=status,
        summary=summary,
        metrics=dict(metrics or {}),
        checks=tuple(checks),
        findings=tuple(findings),
        divergences=tuple(divergences),
        details=dict(details or {}),
        not_measured=tuple(unmeasured(checks)),
        not_applicable=tuple(_why(c) for c in checks if c.outcome is Outcome.NOT_APPLICABLE),
    )


def _why(c: Check) -> str:
    return f"{c.title}: {c.reason}" if c.reason else c.title


def unmeasured(checks: Iterable[Check]) -> list[str]:
    """`title: reason` of every check that could not be made."""
    return [_why(c) for c in checks if c.outcome is Outcome.NOT_MEASURED]
