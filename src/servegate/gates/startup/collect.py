"""Gate 1, startup: both sides serve a real completion, list models, reject the impossible fast.

`/health` can stay green while inference is dead (vLLM #35541), so readiness is a real 1-token
completion; a prompt longer than the context must be rejected quickly, never hang. This module
observes; `judgement.evaluate` judges.
"""

from __future__ import annotations

import asyncio
import time

from servegate.config.models import GateConfig
from servegate.endpoints.protocol import Endpoint
from servegate.endpoints.recording import part
from servegate.endpoints.types import RawResponse
from servegate.gates.capabilities import discover
from servegate.gates.pair import EndpointPair
from servegate.gates.sizing import IMPOSSIBLE_WORD, size
from servegate.gates.startup.canary import collect_canaries
from servegate.gates.startup.capacity import collect_side
from servegate.gates.startup.plan import NAME, READY_REQUEST, SideEvidence, StartupEvidence

# After an over-long prompt timed out, wait up to this many probe deadlines for the side to answer
# a 1-token completion again.
RECOVERY_PROBES = 10


def _model_ids(resp: RawResponse) -> tuple[str, ...]:
    if not resp.ok:
        return ()
    try:
        data = resp.json().get("data", [])
        return tuple(str(m["id"]) for m in data if isinstance(m, dict) and "id" in m)
    except (ValueError, AttributeError, TypeError):
        return ()


async def _side(pair: EndpointPair, ep: Endpoint, cfg: GateConfig, words: int) -> SideEvidence:
    listing = pair.recording(ep, gate=NAME, probe="models")
    models = await listing.raw("GET", "/models", deadline_s=cfg.probe_deadline_s)
    t0 = time.perf_counter()
    ready = await ep.completion(pair.body(READY_REQUEST), deadline_s=cfg.probe_deadline_s)
    ready_ms = (time.perf_counter() - t0) * 1e3 if ready.ok else None
    pair.recorder.record(
        gate=NAME,
        probe="ready",
        side=ep.name,
        api="completions",
        request=pair.body(READY_REQUEST),
        result=ready,
    )
    # Capabilities first, the over-long prompt last: a server that does not reject that prompt
    # may keep computing it after the client gave up (transformers serve 5.24 does), and every
    # probe queued behind it would time out — read as "could not be checked" when it was the
    # over-long prompt that held the server.
    prober = pair.recording(ep, gate=NAME, probe="capabilities")
    caps = await discover(prober, pair.model, deadline_s=cfg.probe_deadline_s) if ready.ok else {}
    impossible_body = pair.body(
        {
            "prompt": IMPOSSIBLE_WORD * words,
            "max_tokens": 16,
            "temperature": 0,
        }
    )
    t0 = time.perf_counter()
    impossible = await ep.completion(impossible_body, deadline_s=cfg.probe_deadline_s)
    impossible_ms = (time.perf_counter() - t0) * 1e3
    pair.recorder.record(
        gate=NAME,
        probe="impossible-request",
        side=ep.name,
        api="completions",
        request=impossible_body,
        result=impossible,
    )
    recovered_ms, window_s = None, 0.0
    # Only a side that answered the ready request can be waited for: one that answered nothing
    # is hung, not busy, and waiting would only delay the verdict.
    if ready.ok and impossible.error is not None and impossible.error.hung:
        # A server that keeps computing a request its client abandoned answers every later
        # request late: wait until it answers again, so the gates after this one measure the
        # server and not this probe's leftovers, and say how long that took.
        window_s = cfg.probe_deadline_s * RECOVERY_PROBES
        recovered_ms = await _recovery_ms(pair, ep, cfg.probe_deadline_s, window_s)
    return SideEvidence(
        name=ep.name,
        base_url=ep.base_url,
        models_status=models.status,
        models=_model_ids(models),
        ready=ready,
        ready_ms=ready_ms,
        impossible=impossible,
        impossible_ms=impossible_ms,
        capabilities=caps,
        recovered_ms=recovered_ms,
        recovery_window_s=window_s,
    )


async def _recovery_ms(
    pair: EndpointPair, ep: Endpoint, deadline_s: float, window_s: float
) -> float | None:
    probe = pair.recording(ep, gate=NAME, probe="impossible-request:recovery")
    t0 = time.perf_counter()
    while (time.perf_counter() - t0) < window_s:
        again = await probe.completion(pair.body(READY_REQUEST), deadline_s=deadline_s)
        if again.ok:
            return (time.perf_counter() - t0) * 1e3
        if (
            again.status is not None
            or again.error is None
            or again.error.category
            not in (
                "timeout",
                "stalled",
            )
        ):
            await asyncio.sleep(min(1.0, deadline_s))
    return None


async def collect(pair: EndpointPair, cfg: GateConfig) -> StartupEvidence:
    """Size the over-long prompt from both sides' contexts, then probe both, baseline first."""
    with part("context sizing"):
        sized = await size(pair, cfg, NAME)
    with part("readiness, capabilities, the over-long prompt"):
        baseline = await _side(pair, pair.baseline, cfg, sized.words)
        candidate = await _side(pair, pair.candidate, cfg, sized.words)
    with part("canaries"):
        canaries = await collect_canaries(pair, cfg, NAME)
    with part("over-capacity request"):
        capacity = (
            await collect_side(pair, pair.baseline, cfg),
            await collect_side(pair, pair.candidate, cfg),
        )
    return StartupEvidence(
        baseline,
        candidate,
        sized.words,
        cfg.probe_deadline_s,
        sizing=sized,
        baseline_launch=pair.launches.get(pair.baseline.name),
        candidate_launch=pair.launches.get(pair.candidate.name),
        capacity=capacity,
        canaries=canaries,
    )
