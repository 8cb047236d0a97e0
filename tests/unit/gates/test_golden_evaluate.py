from servegate.config.models import Policy
from servegate.endpoints.errors import ErrorCategory, RequestError
from servegate.endpoints.types import Completion
from servegate.gates.golden import GoldenEvidence, Observation, ProbeStatus, evaluate, judge
from servegate.probes import Probe, default_suite
from servegate.verdict.model import Severity, Status


def _probe(probe_id: str) -> Probe:
    return next(p for p in default_suite().probes if p.id == probe_id)


def _text(text: str) -> Completion:
    return Completion(status=200, content=text, finish_reason="stop")


def _evidence(*observations: Observation) -> GoldenEvidence:
    return GoldenEvidence(observations, "http://b/v1", "http://c/v1", "m")


OK_PROBE = _probe("canary-ok")


def test_rollback_when_candidate_answers_commas_instead_of_ok() -> None:
    result = evaluate(
        _evidence(Observation(OK_PROBE, _text("OK"), _text(",,,,,,,,,,,,,,,,"))), Policy()
    )
    assert result.status is Status.FAIL
    categories = {f.category for f in result.findings}
    assert categories == {"degeneration", "canary"}
    degenerate = next(f for f in result.findings if f.category == "degeneration")
    assert degenerate.severity is Severity.CRITICAL
    assert degenerate.candidate_excerpt == ",,,,,,,,,,,,,,,,"
    assert degenerate.curl is not None
    assert "http://c/v1/chat/completions" in degenerate.curl


def test_degeneration_blocks_even_when_the_baseline_fails_the_assertion() -> None:
    obs = Observation(OK_PROBE, _text("Sure! Here it is: OK."), _text("!!!!!!!!!!!!!!!!"))
    assert judge(obs) is ProbeStatus.BASELINE_FAIL
    assert evaluate(_evidence(obs), Policy()).status is Status.FAIL


def test_identical_answers_pass() -> None:
    result = evaluate(_evidence(Observation(OK_PROBE, _text("OK"), _text("OK"))), Policy())
    assert result.status is Status.PASS
    assert result.metrics["exact_match_rate"] == 1.0


def test_both_failing_is_baseline_fail_and_does_not_block() -> None:
    obs = Observation(OK_PROBE, _text("Hello there"), _text("Hello, there"))
    assert judge(obs) is ProbeStatus.BASELINE_FAIL
    result = evaluate(_evidence(obs), Policy())
    assert result.status is Status.PASS
    assert [f.category for f in result.findings] == ["changed"]
    assert result.metrics["baseline_fail"] == 1


def test_candidate_timeout_where_baseline_answered_is_a_critical_timeout_finding() -> None:
    hung = Completion(status=None, error=RequestError(ErrorCategory.TIMEOUT, "no headers in 60 s"))
    result = evaluate(_evidence(Observation(OK_PROBE, _text("OK"), hung)), Policy())
    assert result.status is Status.FAIL
    first = result.findings[0]
    assert (first.category, first.severity) == ("timeout", Severity.CRITICAL)


def test_empty_output_where_baseline_had_text_fails() -> None:
    result = evaluate(_evidence(Observation(OK_PROBE, _text("Hi"), _text(""))), Policy())
    assert "empty_output" in {f.category for f in result.findings}
    assert result.status is Status.FAIL


def test_baseline_errors_everywhere_make_the_gate_inconclusive() -> None:
    down = Completion(status=None, error=RequestError(ErrorCategory.INFRA, "refused"))
    result = evaluate(_evidence(Observation(OK_PROBE, down, _text("OK"))), Policy())
    assert result.status is Status.INCONCLUSIVE


def test_zero_probes_is_inconclusive_never_pass() -> None:
    assert evaluate(_evidence(), Policy()).status is Status.INCONCLUSIVE
