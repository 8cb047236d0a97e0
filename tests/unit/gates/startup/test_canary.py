"""Gate 1's first answers: a candidate degenerate where the baseline is not fails, critically."""

from servegate.endpoints.errors import ErrorCategory, RequestError
from servegate.endpoints.types import Completion
from servegate.gates.startup.canary import CanaryAnswer, canary_probes, judge_canaries
from servegate.verdict.model import Outcome, Severity

URL = "http://c/v1"


def _text(text: str) -> Completion:
    return Completion(status=200, content=text, finish_reason="stop")


def _answers(baseline: Completion, candidate: Completion) -> tuple[CanaryAnswer, ...]:
    probe = canary_probes()[0]
    return (CanaryAnswer(probe, {"model": "m", **probe.request}, baseline, candidate),)


def test_the_canaries_are_the_suites_first_three() -> None:
    probes = canary_probes()
    assert [p.category for p in probes] == ["canary"] * 3
    assert probes[0].id == "canary-ok"


def test_commas_where_the_baseline_answers_ok_fail_gate_1_critically() -> None:
    [made], findings = judge_canaries(_answers(_text("OK"), _text(",,,,,,,,,,,,,,,,,,,,")), URL)
    assert made.outcome is Outcome.FAIL
    [finding] = findings
    assert (finding.probe, finding.category) == ("canary-ok", "degeneration")
    assert finding.severity is Severity.CRITICAL
    assert finding.candidate_excerpt == ",,,,,,,,,,,,,,,,,,,,"
    assert finding.curl is not None
    assert finding.curl.startswith("curl -sS http://c/v1/chat/completions ")
    assert '"model": "m"' in finding.curl


def test_a_changed_but_fluent_answer_passes() -> None:
    [made], findings = judge_canaries(_answers(_text("OK"), _text("Okay.")), URL)
    assert made.outcome is Outcome.PASS
    assert findings == []


def test_degenerate_on_both_sides_is_not_the_candidates_regression() -> None:
    commas = _text(",,,,,,,,,,,,,,,,,,,,")
    [made], findings = judge_canaries(_answers(commas, commas), URL)
    assert made.outcome is Outcome.PASS
    assert findings == []


def test_a_side_that_errs_leaves_the_check_not_measured() -> None:
    failed = Completion(status=500, error=RequestError(ErrorCategory.SERVER, "HTTP 500"))
    [made], findings = judge_canaries(_answers(_text("OK"), failed), URL)
    assert made.outcome is Outcome.NOT_MEASURED
    assert findings == []
    [none], _ = judge_canaries((), URL)
    assert none.outcome is Outcome.NOT_MEASURED
