"""The one decision rule every gate and the Correctness Report share."""

import pytest

from servegate.verdict.judgement import at_most, check, combine, gate_result, judge, not_measured
from servegate.verdict.model import Outcome, Status

PASSED = check("a", "a", failed=False)
FAILED = check("b", "b", failed=True, reason="too much")
GAP = not_measured("c", "c", "the server has no echo")
CORE_GAP = not_measured("d", "d", "no logprobs", core=True)


@pytest.mark.parametrize(
    ("checks", "strict", "status"),
    [
        ([PASSED], False, Status.PASS),
        ([PASSED, FAILED], False, Status.FAIL),
        ([FAILED, CORE_GAP], False, Status.FAIL),
        ([PASSED, GAP], False, Status.PASS),
        ([PASSED, GAP], True, Status.INCONCLUSIVE),
        ([PASSED, CORE_GAP], False, Status.INCONCLUSIVE),
        ([GAP], False, Status.INCONCLUSIVE),
        ([], False, Status.INCONCLUSIVE),
    ],
    ids=[
        "measured-and-held", "any-failure-fails", "failure-beats-a-gap", "gap-is-listed",
        "strict-gap", "core-gap", "nothing-measured", "no-checks",
    ],
)  # fmt: skip
def test_fail_beats_not_measured_beats_pass(checks: list, strict: bool, status: Status) -> None:
    assert judge(checks, strict=strict)[0] is status


def test_a_pass_with_a_gap_lists_the_gap_in_the_result() -> None:
    result = gate_result("numerics", [PASSED, GAP])
    assert result.status is Status.PASS
    assert result.not_measured == ("c: the server has no echo",)
    assert "1 not measured" in result.summary


def test_the_reason_of_an_inconclusive_gate_names_the_missing_core_measurement() -> None:
    status, reason = judge([PASSED, CORE_GAP])
    assert status is Status.INCONCLUSIVE
    assert reason == "not measured: d: no logprobs"


def test_at_most_compares_and_a_missing_value_is_not_measured() -> None:
    over = at_most("x", "drift", 0.3, 0.2, unit="nats", policy_key="tolerance.dlogprob_nats")
    assert over.outcome is Outcome.FAIL
    assert (over.candidate, over.limit) == ("0.3 nats", "≤ 0.2 nats")
    assert at_most("x", "drift", 0.2, 0.2, unit="nats").outcome is Outcome.PASS
    missing = at_most("x", "drift", None, 0.2, unit="nats", why_missing="no logprobs")
    assert (missing.outcome, missing.reason) == (Outcome.NOT_MEASURED, "no logprobs")


def test_combine_reads_several_checks_as_one() -> None:
    assert combine([PASSED, FAILED]) is Outcome.FAIL
    assert combine([GAP, GAP]) is Outcome.NOT_MEASURED
    assert combine([PASSED, GAP]) is Outcome.PASS
