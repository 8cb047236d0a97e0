"""Where each gate's time went, part by part: the rows every report format prints."""

from __future__ import annotations

from servegate.verdict.model import GateResult, PartTime, Report

__all__ = ["NOTE", "budget_plans", "largest_parts", "part_rows"]

NOTE = (
    "A part's seconds are the time some request of it was in flight on either side; parts run "
    "at the same time (the baseline's noise floor while the candidate answers) and judging "
    "takes time too, so they need not sum to the gate's seconds."
)


def _requests(p: PartTime) -> str:
    return ", ".join(f"{side} {n}" for side, n in p.requests.items())


def part_rows(report: Report) -> list[tuple[str, str, str, str]]:
    """(gate, part, seconds, requests per side) for every part of every gate that ran, each
    gate's parts followed by how busy each side was."""
    rows = []
    for g in report.gates:
        if g.time is None or not g.time.parts:
            continue
        rows += [(g.name, p.part, f"{p.seconds:.1f} s", _requests(p)) for p in g.time.parts]
        if g.time.busy:
            busy = ", ".join(f"{side} {s:.1f} s" for side, s in g.time.busy.items())
            rows.append((g.name, "(each side busy)", busy, g.time.busy_text()))
        if g.time.plan:
            share = "" if g.time.share is None else f"{g.time.share:.0%} of its scalable work"
            rows.append((g.name, "(budget plan)", share, g.time.plan))
    return rows


def budget_plans(report: Report) -> list[tuple[str, str]]:
    """(gate, what the run's budget gave it and gave up) for each gate planned by `--budget`."""
    return [(g.name, g.time.plan) for g in report.gates if g.time is not None and g.time.plan]


def largest_parts(gate: GateResult, n: int = 3) -> str:
    """`noise floor 40.1 s (98), probes 8.2 s (24), …`: the gate's `n` longest parts."""
    if gate.time is None or not gate.time.parts:
        return ""
    shown = ", ".join(p.text() for p in gate.time.parts[:n])
    more = len(gate.time.parts) - n
    busy = gate.time.busy_text()
    return shown + (f", and {more} more" if more > 0 else "") + (f" ({busy})" if busy else "")
