"""What changed between two runs' reports: verdict, gates, checks, Correctness rows, findings.

Pure: two `Report`s in, a list of changes out. Nothing is judged again; each side's own
statuses and values are compared as stored. A check is identified by gate and name, a
Correctness row by its metric, a finding by gate, probe and category.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from servegate.verdict.model import Check, CorrectnessRow, Finding, Report


@dataclass(frozen=True)
class Change:
    """One difference: what (`verdict`, `gate`, `check`, `row`, `finding`), where, and both
    sides' values (`-` where that run has no such item)."""

    kind: str
    gate: str
    item: str
    field: str
    a: str
    b: str


@dataclass(frozen=True)
class RunDiff:
    run_a: str
    run_b: str
    changes: tuple[Change, ...]

    @property
    def same(self) -> bool:
        return not self.changes

    def as_json(self) -> dict[str, Any]:
        return {
            "run_a": self.run_a,
            "run_b": self.run_b,
            "same": self.same,
            "changes": [asdict(c) for c in self.changes],
        }


ABSENT = "-"
CHECK_FIELDS = ("outcome", "candidate", "baseline", "limit")


def _fields(
    kind: str, gate: str, item: str, a: Mapping[str, str] | None, b: Mapping[str, str] | None
) -> Iterator[Change]:
    if a is None or b is None:  # present in one run only: its first field says what it was
        key = next(iter(a or b or {"": ""}))
        yield Change(kind, gate, item, key, a[key] if a else ABSENT, b[key] if b else ABSENT)
        return
    for key, value in a.items():
        if b.get(key) != value:
            yield Change(kind, gate, item, key, value, b.get(key, ABSENT))


def _checks(report: Report) -> dict[tuple[str, str], Check]:
    return {(g.name, c.name): c for g in report.gates for c in g.checks}


def _check_view(c: Check | None) -> dict[str, str] | None:
    return None if c is None else {k: str(getattr(c, k)) for k in CHECK_FIELDS}


def _row_view(r: CorrectnessRow | None) -> dict[str, str] | None:
    return None if r is None else {"status": r.status.value, "candidate": r.candidate,
                                   "baseline": r.baseline}  # fmt: skip


def _findings(report: Report) -> dict[tuple[str, str, str], Finding]:
    out: dict[tuple[str, str, str], Finding] = {}
    for g in report.gates:
        for f in g.findings:
            out.setdefault((g.name, f.probe, f.category), f)
    return out


def _union(a: Mapping[Any, Any], b: Mapping[Any, Any]) -> list[Any]:
    return list(a) + [k for k in b if k not in a]


def diff_reports(a: Report, b: Report) -> RunDiff:
    """Every difference between run A's report and run B's, verdict first."""
    changes: list[Change] = []
    changes += _fields("verdict", "", "verdict",
                       {"verdict": a.verdict.value, "exit_code": str(a.exit_code)},
                       {"verdict": b.verdict.value, "exit_code": str(b.exit_code)})  # fmt: skip
    gates_a = {g.name: g for g in a.gates}
    gates_b = {g.name: g for g in b.gates}
    for name in _union(gates_a, gates_b):
        ga, gb = gates_a.get(name), gates_b.get(name)
        changes += _fields("gate", name, name, {"status": ga.status.value} if ga else None,
                           {"status": gb.status.value} if gb else None)  # fmt: skip
    checks_a, checks_b = _checks(a), _checks(b)
    for gate, check in _union(checks_a, checks_b):
        ca, cb = checks_a.get((gate, check)), checks_b.get((gate, check))
        either = ca or cb
        title = either.title if either is not None else check
        changes += _fields("check", gate, f"{check}: {title}", _check_view(ca), _check_view(cb))
    rows_a = {r.metric: r for r in a.correctness}
    rows_b = {r.metric: r for r in b.correctness}
    for metric in _union(rows_a, rows_b):
        ra, rb = rows_a.get(metric), rows_b.get(metric)
        changes += _fields("row", ra.gate if ra else rb.gate if rb else "", metric,
                           _row_view(ra), _row_view(rb))  # fmt: skip
    found_a, found_b = _findings(a), _findings(b)
    for key in _union(found_a, found_b):
        fa, fb = found_a.get(key), found_b.get(key)
        if (fa is None) != (fb is None):
            f = fa or fb
            assert f is not None
            shown = f"{f.severity.value}: {f.message}"
            changes.append(Change("finding", key[0], f"{key[1]} ({key[2]})",
                                  "removed" if fb is None else "added",
                                  shown if fa else ABSENT, shown if fb else ABSENT))  # fmt: skip
        elif fa is not None and fb is not None and fa.severity != fb.severity:
            changes.append(Change("finding", key[0], f"{key[1]} ({key[2]})", "severity",
                                  fa.severity.value, fb.severity.value))  # fmt: skip
    return RunDiff(a.run_id, b.run_id, tuple(changes))
