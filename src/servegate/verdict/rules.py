"""Pure verdict rules: gate results in, one verdict and exit code out."""

from __future__ import annotations

from collections.abc import Sequence

from servegate.verdict.model import GateResult, Status, Verdict

EXIT_PASS = 0
EXIT_FAIL = 1
EXIT_USAGE = 2
EXIT_INCONCLUSIVE = 3
EXIT_INTERNAL = 4

EXIT_CODES = {
    Status.PASS: EXIT_PASS,
    Status.FAIL: EXIT_FAIL,
    Status.INCONCLUSIVE: EXIT_INCONCLUSIVE,
}


def decide(results: Sequence[GateResult]) -> Verdict:
    """Any failed gate fails the run (roll back); otherwise anything unmeasured makes it
    inconclusive; a pass needs at least one gate that passed. Skipped gates judge nothing."""
    failed = [r for r in results if r.status is Status.FAIL]
    if failed:
        names = ", ".join(r.name for r in failed)
        return Verdict(status=Status.FAIL, exit_code=EXIT_FAIL, reason=f"failed: {names}")
    unmeasured = [r for r in results if r.status is Status.INCONCLUSIVE]
    if unmeasured:
        names = ", ".join(r.name for r in unmeasured)
        return Verdict(
            status=Status.INCONCLUSIVE, exit_code=EXIT_INCONCLUSIVE, reason=f"inconclusive: {names}"
        )
    if not any(r.status is Status.PASS for r in results):
        return Verdict(
            status=Status.INCONCLUSIVE, exit_code=EXIT_INCONCLUSIVE, reason="no gate was measured"
        )
    return Verdict(status=Status.PASS, exit_code=EXIT_PASS, reason="all gates passed")
