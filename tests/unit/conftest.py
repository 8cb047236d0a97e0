"""Reports built the way the runner builds them (real checks through `gate_result`), carrying the
hostile text a server can return: script tags, event handlers, `javascript:` links, `</script>`,
Markdown table breakers, NUL, ANSI and other control bytes, and lone surrogates."""

from __future__ import annotations

import pytest

from servegate.verdict.correctness import correctness_table
from servegate.verdict.judgement import at_most, check, gate_result, not_measured
from servegate.verdict.model import (
    Divergence,
    Finding,
    Fingerprint,
    GateResult,
    Report,
    Severity,
    Status,
)
from servegate.verdict.rules import decide

SCRIPT = "<script>document.title='pwned';window.__pwned=1</script>"
IMG = "<img src=x onerror=\"document.title='pwned';window.__pwned=1\">"
LINK = "<a href=\"javascript:document.title='pwned'\">click</a>"
CLOSE = "</script><script>document.title='pwned'</script>"
CONTROL = "NUL\x00 BEL\x07 ESC\x1b[31mred\x1b[0m VT\x0b C1\x9b lone\udc80 RLO\u202e end"
TABLE = "a | b `tick` ``` fence **bold** [x](javascript:alert(1))"
HOSTILE = f"{SCRIPT} {IMG} {LINK} {CLOSE} {CONTROL} {TABLE}"


def _golden() -> GateResult:
    checks = [
        check("regressions", "probes regressed", core=True, failed=True, candidate="2 of 3",
              limit="0", reason=f"canary-ok: {SCRIPT}"),
        check("deterministic", "deterministic canaries that pass on the baseline", failed=True,
              baseline="100%", candidate="0%", limit="100%", row="deterministic pass rate",
              policy_key="deterministic_pass_rate_min"),
        at_most("degeneration", "severe degeneration", 1.0, 0.0, unit="answer(s)",
                row="severe degeneration"),
        not_measured("structured", "JSON parse rate", f"the candidate refused {IMG}"),
    ]  # fmt: skip
    findings = [
        Finding(probe="canary-ok", category="regressed", severity=Severity.CRITICAL,
                message=f"expected OK, got commas {CLOSE}", baseline_excerpt="OK",
                candidate_excerpt=",,,,,,,,,,,,,,,,", side="candidate",
                curl="curl -sS 'http://c/v1/chat/completions' -d '{\"model\": \"m\"}'"),
        Finding(probe=f"tool-{SCRIPT}", category="tool_args", severity=Severity.MAJOR,
                message=f"arguments {IMG}", baseline_excerpt=f'{{"city": "Paris"}} {TABLE}',
                candidate_excerpt=f'{{"city": "{LINK}"}} {CONTROL}',
                curl=f"curl -sS http://c/v1 -d '{CLOSE}'"),
        Finding(probe="refusal", category="baseline-fail", severity=Severity.INFO,
                message="both sides fail"),
    ]  # fmt: skip
    details = {
        "probes": [
            {"probe": "canary-ok", "category": "canary", "status": "regressed", "why": "x"},
            {"probe": f"tool-{SCRIPT}", "category": "tools", "status": "regressed", "why": IMG},
            {"probe": "refusal", "category": "refusal", "status": "baseline-fail", "why": "y"},
            {"probe": "json-schema", "category": "structured", "status": "inconclusive",
             "why": "the candidate refused json_schema"},
            {"probe": "chinese", "category": "multilingual", "status": "pass", "why": ""},
        ]
    }  # fmt: skip
    return gate_result("golden", checks, findings=findings, details=details,
                       metrics={"regressed": 2, "exact_match_rate": 0.4})  # fmt: skip


def _numerics() -> GateResult:
    checks = [
        at_most("dlogprob", "mean |Δlogprob| on the common prefix", 0.5, 0.2, unit="nats",
                row="numerical drift", core=True, policy_key="noise_k"),
        not_measured("perplexity_shift", "perplexity shift on the reference texts",
                     "no echo logprobs", row="perplexity shift"),
    ]  # fmt: skip
    divergences = [
        Divergence(gate="numerics", probe="n-1", token_index=3, baseline_token=" Paris",
                   candidate_token=SCRIPT, margin_nats=4.2, gap_nats=9.1,
                   candidate_in_baseline_top_k=False, baseline_in_candidate_top_k=False,
                   explanation="confident", blocking=True, note=IMG),
        Divergence(gate="numerics", probe="n-2", token_index=7, baseline_token=" the",
                   candidate_token=" a", margin_nats=0.03, gap_nats=0.03,
                   candidate_in_baseline_top_k=True, baseline_in_candidate_top_k=True,
                   explanation="near-tie"),
    ]  # fmt: skip
    metrics = {
        "aa_source": "repeat,prefix-cache",
        "aa_exact_match_rate": 1.0,
        "aa_mean_abs_dlogprob_nats": 0.0,
        "aa_prefix_cache_flip_rate": 0.05,
        "mean_abs_dlogprob_nats": 0.5,
    }
    return gate_result("numerics", checks, divergences=divergences, metrics=metrics)


def _startup() -> GateResult:
    checks = [check("ready", "a real 1-token completion on both sides", failed=False, core=True),
              check("hangs", "requests that hung", failed=False, candidate="0", limit="≤ 0",
                    row="hangs")]  # fmt: skip
    metrics = {"baseline_ready_ms": 41.5, "candidate_ready_ms": 44.0, "candidate_impossible_ms": 9}
    return gate_result("startup", checks, metrics=metrics)


def make_report(gates: tuple[GateResult, ...], *, model: str = f"smol {SCRIPT}") -> Report:
    """A report as the runner assembles it: the verdict decided by the real rule."""
    verdict = decide(list(gates))
    return Report(
        tool="servegate 0.1.0", run_id="0123456789ab", started_at="2026-12-01T10:00:00+00:00",
        finished_at="2026-12-01T10:01:00+00:00", duration_s=60.0, verdict=verdict.status,
        exit_code=verdict.exit_code, reason=verdict.reason,
        baseline=Fingerprint(url="http://127.0.0.1:8001/v1", model=model, version="0.3.16",
                             models=(model,), matrix={"quant": "Q4_1"}),
        candidate=Fingerprint(url="http://127.0.0.1:8002/v1", model=model,
                              version=f"mixed {CONTROL}", models=(model,)),
        gates=gates, correctness=correctness_table(list(gates)),
        definitions={"e2el_ms": "last token chunk - request sent"},
    )  # fmt: skip


@pytest.fixture
def failing_report() -> Report:
    skipped = GateResult(name="context", status=Status.SKIP, summary="not run")
    return make_report((_startup(), _numerics(), _golden(), skipped))


@pytest.fixture
def hostile() -> str:
    """Every hostile string the reports above carry, in one."""
    return HOSTILE


@pytest.fixture
def passing_report() -> Report:
    return make_report((_startup(),), model="smol")
