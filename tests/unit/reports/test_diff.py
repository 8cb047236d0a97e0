"""`diff_reports`: what changed between two runs, from their stored reports only."""

from __future__ import annotations

from servegate.reports.diff import Change, diff_reports
from servegate.verdict.model import Report


def test_the_same_report_has_no_change(failing_report: Report) -> None:
    result = diff_reports(failing_report, failing_report)
    assert result.same
    assert result.as_json()["changes"] == []


def test_a_fix_shows_verdict_gates_checks_rows_and_findings(
    failing_report: Report, passing_report: Report
) -> None:
    fixed = passing_report.model_copy(update={"run_id": "fedcba987654"})
    result = diff_reports(failing_report, fixed)
    assert result.run_a == "0123456789ab"
    assert result.changes[:2] == (
        Change("verdict", "", "verdict", "verdict", "fail", "pass"),
        Change("verdict", "", "verdict", "exit_code", "1", "0"),
    )
    gates = [c for c in result.changes if c.kind == "gate"]
    assert [(c.gate, c.a, c.b) for c in gates] == [
        ("numerics", "fail", "-"), ("golden", "fail", "-"), ("context", "skip", "-")
    ]  # fmt: skip
    checks = {(c.gate, c.item.split(":")[0]) for c in result.changes if c.kind == "check"}
    assert ("numerics", "dlogprob") in checks
    assert ("startup", "ready") not in checks  # unchanged
    rows = {c.item for c in result.changes if c.kind == "row"}
    assert rows == {"deterministic pass rate", "numerical drift", "perplexity shift",
                    "severe degeneration"}  # fmt: skip
    removed = [c for c in result.changes if c.kind == "finding"]
    assert {c.field for c in removed} == {"removed"}
    assert any(c.item == "canary-ok (regressed)" and c.b == "-" for c in removed)


def test_a_changed_value_names_the_field(failing_report: Report) -> None:
    gates = list(failing_report.gates)
    numerics = gates[1]
    checks = list(numerics.checks)
    checks[0] = checks[0].model_copy(update={"candidate": "0.7 nats"})
    gates[1] = numerics.model_copy(update={"checks": tuple(checks)})
    later = failing_report.model_copy(update={"gates": tuple(gates)})
    [change] = diff_reports(failing_report, later).changes
    assert change == Change("check", "numerics", "dlogprob: mean |Δlogprob| on the common prefix",
                            "candidate", "0.5 nats", "0.7 nats")  # fmt: skip


def test_an_added_finding_is_listed(failing_report: Report, passing_report: Report) -> None:
    result = diff_reports(passing_report, failing_report)
    added = [c for c in result.changes if c.kind == "finding"]
    assert {c.field for c in added} == {"added"}
    assert all(c.a == "-" for c in added)
