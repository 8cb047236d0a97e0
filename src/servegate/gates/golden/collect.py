"""Gate 3, golden prompts: behaviour users depend on still holds, judged relative to the baseline.

A probe regresses when the baseline passes it and the candidate fails it — unless the baseline's
own answer changes along its own paths (within noise) or the candidate left the baseline's
answer at a near-tie (explained drift); both are reported, neither blocks (golden_probe.py).
Both failing is `baseline-fail`. Every probe is also streamed on both sides: a streamed answer
that differs where the baseline's does not, or that fails where the baseline's stream passes, is
a stream regression. Degeneration (a same-character run, abnormal characters, punctuation soup,
empty output where the baseline had text) blocks whatever the assertions say.
"""

from __future__ import annotations

import asyncio
from asyncio import Future
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from servegate.config.models import GateConfig, Policy
from servegate.endpoints.recording import part
from servegate.endpoints.types import Completion
from servegate.gates import batching
from servegate.gates.batching import Batching
from servegate.gates.golden.judgement import evaluate as evaluate_probes
from servegate.gates.golden.probe import (
    HIT_NOT_SENT,
    NAME,
    GoldenEvidence,
    ProbeObservation,
    ProbeStatus,
    needs_noise,
)
from servegate.gates.golden.responses import collect_responses, with_responses
from servegate.gates.pair import EndpointPair, not_sent
from servegate.probes import Probe, Suite, default_suite, load_suite
from servegate.verdict.model import GateResult

__all__ = ["NAME", "GoldenEvidence", "ProbeObservation", "ProbeStatus", "collect", "evaluate"]

ProgressFn = Callable[[int, int, str], None]
TOP_LOGPROBS = 5
STREAMED = "streamed"
PILOT = {"messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 2, "temperature": 0}


def select_probes(cfg: GateConfig) -> Suite:
    """The suite to run: the user's file or the shipped default, filtered by category."""
    suite = load_suite(cfg.suite) if cfg.suite is not None else default_suite()
    if cfg.categories is None:
        return suite
    wanted = set(cfg.categories)
    return suite.model_copy(
        update={"probes": tuple(p for p in suite.probes if p.category in wanted)}
    )


def with_logprobs(probe: Probe) -> dict[str, Any]:
    """The probe's request asking for top-k logprobs too (which never changes greedy tokens),
    so a changed answer can be traced to its first divergence. Requests with tools, a response
    format or their own logprobs are sent as written."""
    request = probe.request
    if any(k in request for k in ("tools", "response_format", "logprobs", "functions")):
        return dict(request)
    if probe.api == "chat":
        return {**request, "logprobs": True, "top_logprobs": TOP_LOGPROBS}
    return {**request, "logprobs": TOP_LOGPROBS}


HIT_PART = "the baseline's own path (cache hit)"


class _HitPath:
    """Whether the baseline's cache-hit path is sent. With `baseline_paths: when-needed` it is
    held back until a probe's candidate answers need the baseline's noise (`needs_noise`); from
    then on it is sent as with `always`, and the probes held back before are given theirs at
    the end (`fill`), so every judgement that uses the noise sees all of it."""

    def __init__(self, always: bool) -> None:
        self.sending = always

    def __call__(self, obs: ProbeObservation) -> bool:
        """True when `obs` (its cache hit not sent) needs it: sending starts here."""
        self.sending = self.sending or needs_noise(obs)
        return self.sending


async def _observe(
    pair: EndpointPair, probe: Probe, cfg: GateConfig, logprobs: bool, hit_path: _HitPath
) -> ProbeObservation:
    """The five answers of one probe, in RUNS order (the cache hit a placeholder when it is not
    needed yet: `_HitPath`)."""
    plain = with_logprobs(probe) if logprobs else dict(probe.request)
    streamed = {**probe.request, "stream": True}
    dl, api, pid = cfg.request_deadline_s, probe.api, probe.id

    async def send(ep: Any, body: Mapping[str, Any], label: str, **kw: Any) -> Completion:
        return await pair.send(ep, api, body, gate=NAME, probe=f"{pid}{label}", deadline_s=dl, **kw)

    async def hit() -> Completion:
        with part(HIT_PART):
            return await send(pair.baseline, plain, ":cache-hit", isolate=False)

    loop = asyncio.get_running_loop()
    ref: Future[Completion] = loop.create_future()
    ref_stream: Future[Completion] = loop.create_future()

    async def baseline() -> tuple[Completion, Completion, Completion | None]:
        b = await send(pair.baseline, plain, "")
        ref.set_result(b)
        with part(STREAMED):
            b_stream = await send(pair.baseline, streamed, ":stream")
        ref_stream.set_result(b_stream)
        return b, b_stream, (await hit() if hit_path.sending else None)

    async def candidate() -> tuple[Completion, Completion]:
        def against(body: Mapping[str, Any], label: str, r: Future[Completion]) -> Any:
            return pair.send_against(
                pair.candidate, api, body, gate=NAME, probe=f"{pid}{label}", deadline_s=dl,
                reference=r,
            )  # fmt: skip

        c = await against(plain, "", ref)
        with part(STREAMED):
            return c, await against(streamed, ":stream", ref_stream)

    (b, b_stream, b_hit), (c, c_stream) = await pair.sides(baseline, candidate)
    obs = ProbeObservation(probe, b, b_stream, b_hit or not_sent("baseline", HIT_NOT_SENT), c,
                           c_stream)  # fmt: skip
    if b_hit is None and hit_path(obs):  # right after its own stream: still a cache hit
        obs = replace(obs, baseline_hit=await hit())
    return obs


async def _fill(
    pair: EndpointPair,
    observations: list[ProbeObservation],
    cfg: GateConfig,
    logprobs: bool,
    progress: ProgressFn | None,
    total: int,
) -> list[ProbeObservation]:
    """The cache hits held back before a probe needed them: each probe sent again (isolated, so
    the server holds its prefix), then at once again without isolation, the cache hit. Progress
    counts them after the probes, out of `total` (the probes and the cache hits held back)."""
    out = []
    done = len(observations)
    for obs in observations:
        if not obs.hit_not_sent:
            out.append(obs)
            continue
        probe = obs.probe
        if progress is not None:
            progress(done, total, f"{probe.id}: cache hit")
        done += 1
        plain = with_logprobs(probe) if logprobs else dict(probe.request)
        dl = cfg.request_deadline_s
        with part(HIT_PART):
            await pair.send(pair.baseline, probe.api, plain, gate=NAME,
                            probe=f"{probe.id}:cache-hit:prime", deadline_s=dl)  # fmt: skip
            got = await pair.send(pair.baseline, probe.api, plain, gate=NAME,
                                  probe=f"{probe.id}:cache-hit", deadline_s=dl,
                                  isolate=False)  # fmt: skip
        out.append(replace(obs, baseline_hit=got))
    return out


async def collect(
    pair: EndpointPair, cfg: GateConfig, *, progress: ProgressFn | None = None
) -> GoldenEvidence:
    """Every probe to the baseline (plain, streamed, cache hit) and to the candidate (plain,
    streamed; at the same time when the pair allows it), in suite order, each isolated except
    the cache hit; as many probes at once as both sides batch (gates/batching.py)."""
    probes = select_probes(cfg).probes
    with part("pilot"):
        pilot = await pair.send(
            pair.baseline,
            "chat",
            {**PILOT, "logprobs": True, "top_logprobs": 1},
            gate=NAME,
            probe="pilot",
            deadline_s=cfg.request_deadline_s,
        )
    logprobs = pilot.ok and bool(pilot.logprobs)
    with part("batching"):
        width, measured = await _width(pair, cfg)
    hit_path = _HitPath(cfg.baseline_paths == "always")
    observations = await _observe_all(pair, probes, cfg, logprobs, width, progress, hit_path)
    filled = sum(o.hit_not_sent for o in observations) if hit_path.sending else 0
    total = len(probes) + filled
    if filled:
        observations = await _fill(pair, observations, cfg, logprobs, progress, total)
    with part("Responses API"):
        responses = await collect_responses(pair, cfg)  # /v1/responses, where served
    if progress is not None:
        progress(total, total, "")
    return GoldenEvidence(
        tuple(observations), pair.baseline.base_url, pair.candidate.base_url, pair.model, logprobs,
        responses=responses, concurrency=width, batching=measured,
    )  # fmt: skip


async def _width(pair: EndpointPair, cfg: GateConfig) -> tuple[int, tuple[Batching, ...]]:
    """How many probes go at once: `golden_concurrency`, or with auto as many as both sides
    batch (each measured on its own, the baseline first)."""
    if cfg.golden_concurrency != "auto":
        return cfg.golden_concurrency, ()
    found = await batching.measure_sides(pair, gate=NAME, deadline_s=cfg.request_deadline_s)
    measured = tuple(found.values())
    return (batching.WIDTH if all(m.batches for m in measured) else 1), measured


async def _observe_all(
    pair: EndpointPair,
    probes: Sequence[Probe],
    cfg: GateConfig,
    logprobs: bool,
    width: int,
    progress: ProgressFn | None,
    hit_path: _HitPath,
) -> list[ProbeObservation]:
    """Every probe observed, `width` at a time, in suite order."""
    if width == 1:
        out = []
        for i, probe in enumerate(probes):
            if progress is not None:
                progress(i, len(probes), probe.id)
            out.append(await _observe(pair, probe, cfg, logprobs, hit_path))
        return out
    slots = asyncio.Semaphore(width)
    done = 0

    async def one(probe: Probe) -> ProbeObservation:
        nonlocal done
        async with slots:
            observation = await _observe(pair, probe, cfg, logprobs, hit_path)
        done += 1
        if progress is not None:
            progress(done, len(probes), probe.id)
        return observation

    try:
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(one(p)) for p in probes]
    except BaseExceptionGroup as failed:
        raise failed.exceptions[0] from None
    return [t.result() for t in tasks]


def evaluate(ev: GoldenEvidence, policy: Policy, *, strict: bool = False) -> GateResult:
    """The probes judged relative to the baseline, then the Responses API check."""
    return with_responses(evaluate_probes(ev, policy, strict=strict), ev.responses, strict=strict)
