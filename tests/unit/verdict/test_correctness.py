from servegate.verdict.correctness import correctness_table
from servegate.verdict.judgement import check, gate_result, not_measured
from servegate.verdict.model import GateResult, Status


def _rows(*results: GateResult) -> dict[str, Status]:
    return {r.metric: r.status for r in correctness_table(results)}


def _gate(name: str, *checks_: object) -> GateResult:
    return gate_result(name, list(checks_))  # type: ignore[arg-type]


def test_each_row_takes_its_checks_outcome() -> None:
    golden = _gate(
        "golden",
        check("canaries", "canaries held", failed=True, row="deterministic pass rate"),
        check("degeneration", "severe degeneration", failed=False, row="severe degeneration"),
        not_measured("structured", "structured", "no JSON probe judged",
                     row="structured parse rate"),
    )  # fmt: skip
    assert _rows(golden) == {
        "deterministic pass rate": Status.FAIL,
        "structured parse rate": Status.INCONCLUSIVE,
        "severe degeneration": Status.PASS,
    }


def test_a_row_fed_by_several_gates_fails_when_any_fails_and_shows_each() -> None:
    startup = _gate("startup", check("hangs", "hangs", failed=False, candidate="0", row="hangs"))
    golden = _gate("golden", check("hangs", "hangs", failed=True, candidate="2", row="hangs"))
    (row,) = correctness_table([startup, golden])
    assert (row.metric, row.status, row.gate) == ("hangs", Status.FAIL, "startup, golden")
    assert row.candidate == "startup: 0; golden: 2"


def test_a_row_with_nothing_measured_is_inconclusive_never_pass() -> None:
    numerics = _gate(
        "numerics", not_measured("perplexity_shift", "perplexity", "no echo", core=True,
                                 row="perplexity shift"),
    )  # fmt: skip
    assert _rows(numerics) == {"perplexity shift": Status.INCONCLUSIVE}


def test_skipped_gates_contribute_no_rows() -> None:
    skipped = GateResult(name="golden", status=Status.SKIP, summary="skipped")
    assert _rows(skipped) == {}


def test_rows_follow_the_seed_order_whatever_the_gate_order() -> None:
    golden = _gate("golden", check("d", "d", failed=False, row="severe degeneration"))
    numerics = _gate("numerics", check("p", "p", failed=False, row="numerical drift"))
    assert list(_rows(golden, numerics)) == ["numerical drift", "severe degeneration"]
