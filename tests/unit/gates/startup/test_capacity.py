"""The over-KV-capacity request (vLLM #35541) judged on plain data, and the capacity read from
vLLM 0.32.0's real /metrics and /v1/models answers (tests/data/vllm)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.unit.gates.startup.test_evaluate import _side

from servegate.config.models import Policy
from servegate.endpoints.errors import ErrorCategory, RequestError
from servegate.endpoints.types import Completion
from servegate.gates.startup import StartupEvidence, evaluate
from servegate.gates.startup.capacity import (
    CapacityEvidence,
    judge_capacity,
    kv_capacity,
    max_context,
)
from servegate.verdict.model import Outcome, Severity, Status

DATA = Path(__file__).resolve().parents[3] / "data" / "vllm"
OK = Completion(status=200, content="hello")
REJECTED = Completion(
    status=400, error=RequestError(ErrorCategory.REJECTED, "needs more blocks", status=400)
)
HUNG = Completion(status=None, error=RequestError(ErrorCategory.TIMEOUT, "no headers in 15 s"))


def _sent(name: str, result: Completion, elapsed_ms: float = 300.0) -> CapacityEvidence:
    return CapacityEvidence(name, 4096, 2048, 3072, result, elapsed_ms)


def test_vllm_says_its_capacity_and_context() -> None:
    assert kv_capacity((DATA / "metrics-info.txt").read_text()) == 728 * 128
    listing = json.loads((DATA / "models.json").read_text())
    assert max_context(listing, "smollm2-135m-instruct") == 4096
    assert kv_capacity('vllm:cache_config_info{block_size="16",num_gpu_blocks="None"} 1.0') is None
    assert kv_capacity("llamacpp:prompt_tokens_total 3") is None


def test_a_hang_on_the_over_capacity_prompt_fails_startup_critically() -> None:
    capacity = (_sent("baseline", OK), _sent("candidate", HUNG, 15_000))
    ev = StartupEvidence(_side("baseline"), _side("candidate"), 12000, 15.0, capacity=capacity)
    result = evaluate(ev, Policy())
    assert result.status is Status.FAIL
    finding = next(f for f in result.findings if f.probe == "over-capacity-request")
    assert (finding.category, finding.severity) == ("timeout", Severity.CRITICAL)
    assert "#35541" in finding.message
    hangs = next(c for c in result.checks if c.name == "hangs")
    assert hangs.candidate == "1"


def test_served_or_rejected_fast_passes_and_a_slow_rejection_does_not() -> None:
    for result in (OK, REJECTED):
        checks, findings = judge_capacity(
            _sent("baseline", OK), _sent("candidate", result), Policy()
        )
        assert (checks[0].outcome, findings) == (Outcome.PASS, [])
    checks, findings = judge_capacity(
        _sent("baseline", OK), _sent("candidate", REJECTED, 60_000), Policy()
    )
    assert checks[0].outcome is Outcome.FAIL
    assert [(f.category, f.severity) for f in findings] == [("impossible_request", Severity.MAJOR)]


def test_unknown_or_ample_capacity_is_not_applicable_and_says_why() -> None:
    ample = CapacityEvidence("candidate", 4096, 93184, note="its KV cache holds 93184 tokens")
    checks, findings = judge_capacity(ample, ample, Policy())
    assert (checks[0].outcome, findings) == (Outcome.NOT_APPLICABLE, [])
    assert "93184" in checks[0].reason
    ev = StartupEvidence(
        _side("baseline"), _side("candidate"), 12000, 15.0, capacity=(ample, ample)
    )
    assert evaluate(ev, Policy()).status is Status.PASS  # not core: listed, not blocking
