import pytest

from servegate.verdict.model import GateResult, Status
from servegate.verdict.rules import decide


def _gate(name: str, status: Status) -> GateResult:
    return GateResult(name=name, status=status, summary="")


@pytest.mark.parametrize(
    ("statuses", "verdict", "exit_code"),
    [
        ([Status.PASS, Status.PASS], Status.PASS, 0),
        ([Status.PASS, Status.FAIL], Status.FAIL, 1),
        ([Status.FAIL, Status.INCONCLUSIVE], Status.FAIL, 1),
        ([Status.PASS, Status.INCONCLUSIVE], Status.INCONCLUSIVE, 3),
        ([Status.PASS, Status.SKIP], Status.PASS, 0),
        ([Status.SKIP, Status.SKIP], Status.INCONCLUSIVE, 3),
        ([], Status.INCONCLUSIVE, 3),
    ],
    ids=[
        "all-pass",
        "one-fail",
        "fail-beats-inconclusive",
        "unmeasured-is-inconclusive",
        "skip-judges-nothing",
        "only-skips-never-pass",
        "no-gates-never-pass",
    ],
)
def test_verdict_and_exit_code_follow_the_policy(
    statuses: list[Status], verdict: Status, exit_code: int
) -> None:
    result = decide([_gate(f"g{i}", s) for i, s in enumerate(statuses)])
    assert result.status is verdict
    assert result.exit_code == exit_code


def test_fail_reason_names_the_failed_gates() -> None:
    result = decide([_gate("startup", Status.PASS), _gate("golden", Status.FAIL)])
    assert result.reason == "failed: golden"
