"""A run fails fast on a critical finding (unless asked to complete) and says where each gate's
time and requests went."""

from collections.abc import AsyncIterator
from typing import Any

import pytest

from servegate.config.models import EndpointConfig, GateConfig
from servegate.endpoints.scripted import ScriptedServer, reply_json
from servegate.gates.pair import EndpointPair
from servegate.orchestration.runner import GateProgress, GateRunner, run
from servegate.verdict.model import Finding, GateResult, Severity, Status

COMPLETION = {
    "object": "text_completion",
    "model": "m",
    "choices": [{"index": 0, "text": "Hi", "finish_reason": "length"}],
    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
}


def _server() -> ScriptedServer:
    return (
        ScriptedServer()
        .route("/v1/models", reply_json({"object": "list", "data": [{"id": "m"}]}))
        .route("/v1/completions", reply_json(COMPLETION))
    )


@pytest.fixture
async def urls() -> AsyncIterator[tuple[str, str]]:
    async with _server() as baseline, _server() as candidate:
        yield baseline.url, candidate.url


def gate(name: str, status: Status, severity: Severity | None = None, sends: int = 1) -> GateRunner:
    """A gate that sends `sends` requests to each side, then returns `status` with one finding
    of `severity` (none when None)."""

    async def run_gate(pair: EndpointPair, cfg: GateConfig, progress: GateProgress) -> GateResult:
        for _ in range(sends):
            for ep in (pair.baseline, pair.candidate):
                await pair.send(ep, "completions", {"prompt": "Hello", "max_tokens": 1},
                                gate=name, probe="p", deadline_s=10)  # fmt: skip
        findings = () if severity is None else (
            Finding(probe="canary-ok", category="degeneration", severity=severity, message="x"),
        )  # fmt: skip
        return GateResult(name=name, status=status, summary=name, findings=findings)

    return run_gate


def _cfg(urls: tuple[str, str], **extra: Any) -> GateConfig:
    return GateConfig(
        baseline=EndpointConfig(url=urls[0]),
        candidate=EndpointConfig(url=urls[1]),
        gates=("startup", "numerics", "golden", "performance"),
        **extra,
    )


GATES = {
    "startup": gate("startup", Status.PASS),
    "numerics": gate("numerics", Status.FAIL, Severity.CRITICAL),
    "golden": gate("golden", Status.PASS),
    "performance": gate("performance", Status.PASS),
}


async def test_a_critical_finding_ends_the_run_and_says_which_gates_were_not_run(
    urls: tuple[str, str],
) -> None:
    report = await run(_cfg(urls), gates=GATES)
    assert [(g.name, g.status) for g in report.gates] == [
        ("startup", Status.PASS),
        ("numerics", Status.FAIL),
        ("golden", Status.SKIP),
        ("performance", Status.SKIP),
    ]
    assert report.gates[2].summary == (
        "not run: the run failed fast on numerics (degeneration, critical: canary-ok); "
        "--complete runs every gate"
    )
    assert report.exit_code == 1


async def test_complete_runs_every_correctness_gate_after_a_critical_finding(
    urls: tuple[str, str],
) -> None:
    report = await run(_cfg(urls, complete=True), gates=GATES)
    statuses = [(g.name, g.status) for g in report.gates]
    assert statuses[2] == ("golden", Status.PASS)
    assert statuses[3][1] is Status.SKIP  # performance: a correctness gate failed
    assert report.exit_code == 1


async def test_a_failure_without_a_critical_finding_does_not_end_the_run(
    urls: tuple[str, str],
) -> None:
    gates = {**GATES, "numerics": gate("numerics", Status.FAIL, Severity.MAJOR)}
    report = await run(_cfg(urls), gates=gates)
    assert report.gates[2].status is Status.PASS


async def test_each_gate_says_its_wall_time_and_requests_per_side(urls: tuple[str, str]) -> None:
    gates = {**GATES, "numerics": gate("numerics", Status.PASS, sends=3)}
    report = await run(_cfg(urls), gates=gates)
    numerics = report.gates[1]
    assert numerics.time is not None
    # Every request the servers see counts: each probe goes after an isolation request.
    assert numerics.time.requests == {"baseline": 6, "candidate": 6}
    assert numerics.time.total_requests == 12
    assert numerics.time.seconds > 0
    assert report.gates[0].time is not None
    assert report.gates[0].time.requests == {"baseline": 2, "candidate": 2}
