from servegate.config.models import Policy
from servegate.verdict.correctness import correctness_table
from servegate.verdict.model import Finding, GateResult, Severity, Status


def _rates(regressions: int) -> dict[str, object]:
    return {
        "n": 5,
        "baseline_rate": 0.6,
        "baseline_ci": "[0.23, 0.88]",
        "candidate_rate": 0.6 - regressions / 5,
        "candidate_ci": "[0.05, 0.70]",
        "regressions": regressions,
        "improvements": 0,
        "mcnemar_p_candidate_worse": 0.5 if regressions else 1.0,
    }


def _golden(canary_regressions: int, degenerate: int = 0) -> GateResult:
    findings = tuple(
        Finding(probe=f"p{i}", category="degeneration", severity=Severity.CRITICAL, message="x")
        for i in range(degenerate)
    )
    return GateResult(
        name="golden",
        status=Status.FAIL if canary_regressions or degenerate else Status.PASS,
        summary="",
        metrics={"baseline_severe_degeneration": 0},
        findings=findings,
        details={"categories": {"canary": _rates(canary_regressions)}},
    )


def _rows(*results: GateResult) -> dict[str, Status]:
    return {r.metric: r.status for r in correctness_table(results, Policy())}


def test_a_canary_regression_fails_the_deterministic_row() -> None:
    rows = _rows(_golden(canary_regressions=1))
    assert rows["deterministic pass rate"] is Status.FAIL


def test_no_structured_probes_is_inconclusive_not_pass() -> None:
    assert _rows(_golden(0))["structured parse rate"] is Status.INCONCLUSIVE


def test_new_degeneration_fails_its_row() -> None:
    rows = _rows(_golden(0, degenerate=2))
    assert rows["severe degeneration"] is Status.FAIL
    assert rows["deterministic pass rate"] is Status.PASS


def test_a_timeout_anywhere_counts_as_a_hang() -> None:
    startup = GateResult(
        name="startup",
        status=Status.FAIL,
        summary="",
        findings=(
            Finding(probe="impossible-request", category="timeout", severity=Severity.CRITICAL,
                    message="hung"),
        ),
    )  # fmt: skip
    assert _rows(startup)["hangs"] is Status.FAIL


def test_lower_needle_recall_fails_and_missing_recall_is_inconclusive() -> None:
    worse = GateResult(
        name="context",
        status=Status.FAIL,
        summary="",
        metrics={"needle_recall_baseline": 1.0, "needle_recall_candidate": 0.5},
    )
    unmeasured = GateResult(name="context", status=Status.INCONCLUSIVE, summary="")
    assert _rows(worse)["long-context recall"] is Status.FAIL
    assert _rows(unmeasured)["long-context recall"] is Status.INCONCLUSIVE


def test_skipped_gates_contribute_no_rows() -> None:
    skipped = GateResult(name="golden", status=Status.SKIP, summary="skipped")
    assert set(_rows(skipped)) == {"hangs"}
