"""Gate 1 on managed launches: start-up outcome and log hits, judged relative to the baseline."""

from __future__ import annotations

from servegate.gates.startup.launch import judge_launch, launch_metrics
from servegate.managed.launch_evidence import LaunchEvidence, LaunchOutcome, LogHit
from servegate.verdict.judgement import gate_result
from servegate.verdict.model import Outcome, Severity, Status

FALLBACK = LogHit(
    "llama.cpp-buffer-fallback", "fallback", Severity.MAJOR, 144,
    "... cannot be used with preferred buffer type CPU_REPACK, using CPU instead",
)  # fmt: skip
MISSING = LogHit(
    "module-not-found", "optional-dependency", Severity.MAJOR, 3,
    "ModuleNotFoundError: No module named 'soundfile'", module="soundfile",
)  # fmt: skip


def _ready(side: str, *hits: LogHit) -> LaunchEvidence:
    return LaunchEvidence(side=side, command="engine --port '{port}'", log_path=f"{side}.log",
                          outcome=LaunchOutcome.READY, message="ready in 2.5 s", timeout_s=60,
                          port_open_s=2.4, ready_s=2.5, peak_rss_mb=280.0, hits=hits)  # fmt: skip


def _exited(side: str, *hits: LogHit) -> LaunchEvidence:
    return LaunchEvidence(side=side, command="engine", log_path=f"{side}.log",
                          outcome=LaunchOutcome.EXITED, exit_code=1, timeout_s=60,
                          message="exited with code 1 during start-up after 0.2 s",
                          log_tail="Traceback ...\nModuleNotFoundError: No module named "
                          "'soundfile'", hits=hits)  # fmt: skip


def _status(b: LaunchEvidence | None, c: LaunchEvidence | None) -> Status:
    checks, findings = judge_launch(b, c)
    return gate_result("startup", checks, findings=findings).status


def test_a_fallback_both_logs_show_is_reported_but_does_not_block() -> None:
    _checks, findings = judge_launch(_ready("baseline", FALLBACK), _ready("candidate", FALLBACK))
    [finding] = findings
    assert (finding.category, finding.severity, finding.side) == ("fallback", Severity.INFO,
                                                                  "candidate")  # fmt: skip
    assert "CPU_REPACK" in (finding.candidate_excerpt or "")
    assert _status(_ready("baseline", FALLBACK), _ready("candidate", FALLBACK)) is Status.PASS


def test_a_fallback_only_the_candidate_prints_fails_the_gate() -> None:
    checks, findings = judge_launch(_ready("baseline"), _ready("candidate", FALLBACK))
    [log_check] = [c for c in checks if c.name == "log_scan"]
    assert log_check.outcome is Outcome.FAIL
    assert findings[0].severity is Severity.MAJOR
    assert "only the candidate's log shows it" in findings[0].message
    assert _status(_ready("baseline"), _ready("candidate", FALLBACK)) is Status.FAIL


def test_a_candidate_blocked_by_a_missing_module_fails_with_the_module_named() -> None:
    checks, findings = judge_launch(_ready("baseline"), _exited("candidate", MISSING))
    start = findings[0]
    assert (start.probe, start.category, start.severity) == ("launch", "optional-dependency",
                                                             Severity.CRITICAL)  # fmt: skip
    assert "module 'soundfile'" in start.message
    assert "ModuleNotFoundError" in (start.candidate_excerpt or "")
    [launch] = [c for c in checks if c.name == "launch"]
    assert launch.outcome is Outcome.FAIL
    assert _status(_ready("baseline"), _exited("candidate", MISSING)) is Status.FAIL


def test_a_baseline_that_did_not_start_leaves_the_gate_inconclusive() -> None:
    assert _status(_exited("baseline"), None) is Status.INCONCLUSIVE


def test_a_candidate_log_is_not_judged_when_the_baseline_was_not_launched() -> None:
    checks, findings = judge_launch(None, _ready("candidate", FALLBACK))
    [log_check] = [c for c in checks if c.name == "log_scan"]
    assert log_check.outcome is Outcome.NOT_MEASURED
    assert not any(f.blocking for f in findings)


def test_nothing_is_judged_when_no_side_was_launched() -> None:
    assert judge_launch(None, None) == ([], [])


def test_metrics_carry_load_and_ready_times_per_side() -> None:
    metrics = launch_metrics(_ready("baseline"), _exited("candidate"))
    assert metrics["baseline_load_s"] == 2.4
    assert metrics["baseline_launch_ready_s"] == 2.5
    assert metrics["candidate_launch_ready_s"] is None
