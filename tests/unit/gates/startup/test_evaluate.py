from dataclasses import replace

import pytest

from servegate.config.models import Policy
from servegate.endpoints.errors import ErrorCategory, RequestError
from servegate.endpoints.types import Completion
from servegate.gates.capabilities import Capability
from servegate.gates.startup import SideEvidence, StartupEvidence, evaluate
from servegate.verdict.model import Severity, Status

OK = Completion(status=200, content="Hi")
REJECTED = Completion(
    status=400, error=RequestError(ErrorCategory.REJECTED, "exceeds context", status=400)
)
TIMED_OUT = Completion(status=None, error=RequestError(ErrorCategory.TIMEOUT, "no headers in 15 s"))


def _side(
    name: str,
    *,
    ready: Completion = OK,
    impossible: Completion = REJECTED,
    impossible_ms: float = 40.0,
    caps: dict[str, Capability] | None = None,
) -> SideEvidence:
    return SideEvidence(
        name=name,
        base_url=f"http://127.0.0.1:1/{name}/v1",
        models_status=200,
        models=("m",),
        ready=ready,
        ready_ms=12.0 if ready.ok else None,
        impossible=impossible,
        impossible_ms=impossible_ms,
        capabilities=caps or {},
    )


def _evaluate(baseline: SideEvidence, candidate: SideEvidence) -> tuple[Status, list[str]]:
    result = evaluate(StartupEvidence(baseline, candidate, 12000, 15.0), Policy())
    return result.status, [f.category for f in result.findings if f.blocking]


def test_both_sides_ready_and_rejecting_fast_passes() -> None:
    assert _evaluate(_side("baseline"), _side("candidate")) == (Status.PASS, [])


def test_hanging_on_an_impossible_prompt_fails_with_a_timeout_finding() -> None:
    status, categories = _evaluate(
        _side("baseline"), _side("candidate", impossible=TIMED_OUT, impossible_ms=15000)
    )
    assert status is Status.FAIL
    assert categories == ["timeout"]


def test_a_slow_rejection_is_a_finding() -> None:
    status, categories = _evaluate(_side("baseline"), _side("candidate", impossible_ms=30_000))
    assert (status, categories) == (Status.FAIL, ["impossible_request"])


def test_accepting_what_the_baseline_rejects_is_a_finding() -> None:
    status, categories = _evaluate(_side("baseline"), _side("candidate", impossible=OK))
    assert (status, categories) == (Status.FAIL, ["impossible_request"])


def test_an_impossible_request_the_baseline_accepts_is_listed_as_not_measured() -> None:
    evidence = StartupEvidence(
        _side("baseline", impossible=OK), _side("candidate", impossible=OK), 12000, 15.0
    )
    result = evaluate(evidence, Policy())
    assert result.status is Status.PASS  # the other start-up checks were measured and held
    titles = [n.split(":")[0] for n in result.not_measured]
    assert "a prompt longer than the context is rejected fast" in titles
    assert evaluate(evidence, Policy(), strict=True).status is Status.INCONCLUSIVE


def test_candidate_not_ready_fails_critically() -> None:
    broken = Completion(status=500, error=RequestError(ErrorCategory.SERVER, "boom", status=500))
    result = evaluate(
        StartupEvidence(_side("baseline"), _side("candidate", ready=broken), 12000, 15.0), Policy()
    )
    assert result.status is Status.FAIL
    assert result.findings[0].severity is Severity.CRITICAL


def test_baseline_not_ready_makes_the_gate_inconclusive_and_says_why() -> None:
    down = Completion(status=None, error=RequestError(ErrorCategory.INFRA, "refused"))
    result = evaluate(
        StartupEvidence(_side("baseline", ready=down), _side("candidate"), 12000, 15.0), Policy()
    )
    assert result.status is Status.INCONCLUSIVE
    assert "the baseline is not ready" in result.not_measured[0]


def test_a_capability_the_candidate_lost_is_reported() -> None:
    status, categories = _evaluate(
        _side("baseline", caps={"logprobs": Capability("logprobs", True, "top 5")}),
        _side("candidate", caps={"logprobs": Capability("logprobs", False, "none")}),
    )
    assert (status, categories) == (Status.FAIL, ["capability_lost"])


def test_a_capability_the_candidate_could_not_be_asked_about_is_not_called_lost() -> None:
    result = evaluate(
        StartupEvidence(
            _side("baseline", caps={"logprobs": Capability("logprobs", True, "top 5")}),
            _side("candidate", caps={"logprobs": Capability("logprobs", None, "timeout")}),
            12000,
            15.0,
        ),
        Policy(),
    )
    assert result.status is Status.PASS
    assert [(f.category, f.severity) for f in result.findings] == [
        ("capability_unknown", Severity.MINOR)
    ]
    assert any("logprobs" in n for n in result.not_measured)


@pytest.mark.parametrize(
    ("recovered_ms", "window_s", "said"),
    [
        (95_000.0, 150.0, "answered 95.0 s later (the server kept computing the abandoned request"),
        (None, 150.0, "it answered nothing else for 150 s after servegate gave up"),
        (40.0, 150.0, "a 1-token completion sent after it was answered 0.0 s later"),
    ],
    ids=["busy-then-back", "never-back", "only-that-request-hangs"],
)
def test_a_hang_on_the_impossible_prompt_says_when_the_server_answered_again(
    recovered_ms: float | None, window_s: float, said: str
) -> None:
    candidate = replace(
        _side("candidate", impossible=TIMED_OUT, impossible_ms=15000),
        recovered_ms=recovered_ms,
        recovery_window_s=window_s,
    )
    result = evaluate(StartupEvidence(_side("baseline"), candidate, 12000, 15.0), Policy())
    [finding] = [f for f in result.findings if f.category == "timeout"]
    assert said in finding.message
    assert finding.message.startswith("a prompt longer than the context (12000 words)")
    assert ("kept computing" in finding.message) is (recovered_ms == 95_000.0)
