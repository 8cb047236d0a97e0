"""The gates in the order they run, and running them: correctness first, performance unless a
correctness gate failed, nothing after a side that is not ready, and nothing after a correctness
gate that failed on a critical finding unless the run is asked to `complete`. Each gate's wall
time and requests per side are kept on its result."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence

from servegate.config.models import GateConfig
from servegate.gates import context, embeddings, golden, numerics, performance, sampling, startup
from servegate.gates.pair import EndpointPair
from servegate.orchestration.budget import Budget
from servegate.orchestration.gate_time import TimeRecorder
from servegate.verdict.model import GateResult, Outcome, Severity, Status

ProgressFn = Callable[[str, int, int, str], None]

GateProgress = Callable[[int, int, str], None]
GateRunner = Callable[[EndpointPair, GateConfig, GateProgress], Awaitable[GateResult]]


async def _startup(pair: EndpointPair, cfg: GateConfig, progress: GateProgress) -> GateResult:
    return startup.evaluate(await startup.collect(pair, cfg), cfg.policy, strict=cfg.strict)


async def _numerics(pair: EndpointPair, cfg: GateConfig, progress: GateProgress) -> GateResult:
    opts = numerics.NumericsConfig(prompts=numerics.PROMPTS[: cfg.numerics_prompts])
    evidence = await numerics.collect(pair, cfg, opts)
    return numerics.evaluate(evidence, cfg.policy, strict=cfg.strict)


async def _embeddings(pair: EndpointPair, cfg: GateConfig, progress: GateProgress) -> GateResult:
    evidence = await embeddings.collect(pair, cfg)
    return embeddings.evaluate(evidence, cfg.policy, strict=cfg.strict)


async def _golden(pair: EndpointPair, cfg: GateConfig, progress: GateProgress) -> GateResult:
    evidence = await golden.collect(pair, cfg, progress=progress)
    return golden.evaluate(evidence, cfg.policy, strict=cfg.strict)


async def _sampling(pair: EndpointPair, cfg: GateConfig, progress: GateProgress) -> GateResult:
    plan = sampling.SamplingPlan().scaled(cfg.sampling_share)
    evidence = await sampling.collect(pair, cfg, plan=plan, progress=progress)
    return sampling.evaluate(evidence, cfg.policy, strict=cfg.strict)


async def _context(pair: EndpointPair, cfg: GateConfig, progress: GateProgress) -> GateResult:
    evidence = await context.collect(pair, cfg, progress=progress)
    return context.evaluate(evidence, cfg.policy, strict=cfg.strict)


async def _performance(pair: EndpointPair, cfg: GateConfig, progress: GateProgress) -> GateResult:
    evidence = await performance.collect(pair, cfg, progress=progress)
    return performance.evaluate(evidence, cfg.policy, strict=cfg.strict)


# Explicit registry, in the order the gates run: correctness before performance.
GATES: dict[str, GateRunner] = {
    "startup": _startup,
    "numerics": _numerics,
    "embeddings": _embeddings,
    "golden": _golden,
    "sampling": _sampling,
    "context": _context,
    "performance": _performance,
}
GATE_ORDER = tuple(GATES)
# Judged after the correctness gates, and skipped when one of them failed: a rollback is
# already decided, and speed is not looked at before the answers are known not to be wrong. An
# inconclusive correctness gate still gets a performance measurement: a performance failure
# then fails the run (a rollback is actionable even when some correctness measurement is missing).
AFTER_CORRECTNESS = frozenset({"performance"})
READY_CHECK = "ready"


def _not_ready(result: GateResult) -> str | None:
    """Why the gates after startup are skipped: a side is not ready — the startup gate's
    readiness check (a real 1-token completion on both sides) did not pass. Other startup gaps
    (a capability not measured, `--strict`) do not stop the gates that can still measure."""
    if result.name != "startup":
        return None
    ready = next((c for c in result.checks if c.name == READY_CHECK), None)
    if ready is None and result.status is Status.INCONCLUSIVE:
        return "skipped: a side is not ready (see startup)"  # no readiness was judged at all
    if ready is not None and ready.outcome is not Outcome.PASS:
        return "skipped: a side is not ready (see startup)"
    if any(f.probe == READY_CHECK for f in result.findings):
        return "skipped: a side is not ready (see startup)"
    return None


def failed_fast(result: GateResult) -> str | None:
    """Why the gates after this one are not run: a correctness gate failed on a critical
    finding (degenerate output where the baseline's is fine, a hang, a side that did not start):
    the rollback is decided and more measurement would not change it. None otherwise."""
    if result.name in AFTER_CORRECTNESS or result.status is not Status.FAIL:
        return None
    critical = next((f for f in result.findings if f.severity is Severity.CRITICAL), None)
    if critical is None:
        return None
    return (
        f"not run: the run failed fast on {result.name} ({critical.category}, critical: "
        f"{critical.probe}); --complete runs every gate"
    )


def _correctness_failed(results: Sequence[GateResult]) -> str | None:
    """Why a performance gate is skipped: the correctness gates that ran and failed."""
    ran = [r for r in results if r.name not in AFTER_CORRECTNESS]
    failed = [f"{r.name}: {r.status}" for r in ran if r.status is Status.FAIL]
    if not failed:
        return None
    return f"skipped: a correctness gate failed, the run rolls back ({', '.join(failed)})"


async def run_gates(
    pair: EndpointPair,
    cfg: GateConfig,
    progress: ProgressFn | None = None,
    *,
    finished: Callable[[GateResult], None] | None = None,
    gates: Mapping[str, GateRunner] = GATES,
    previous: Sequence[GateResult] = (),
) -> list[GateResult]:
    """Run the configured gates in order; a side that is not ready skips the rest. Each result is
    handed to `finished` as soon as it is judged, so a caller that cancels the run (the run
    deadline, Ctrl-C) still holds every gate that finished. Gates in `previous` (judged by an
    earlier attempt of a resumed run) are not run again; they count as judged."""
    done = {r.name: r for r in previous}
    results: list[GateResult] = []
    counting = TimeRecorder(pair.recorder)
    pair = dataclasses.replace(pair, recorder=counting)

    def judged(result: GateResult) -> None:
        results.append(result)
        if finished is not None:
            finished(result)

    budget = None if cfg.budget_s is None else Budget(cfg.budget_s)
    for r in previous:
        if budget is not None:
            budget.ran(r.name, r)  # an earlier attempt's gates spent the budget too
    todo = [name for name in gates if name in cfg.gates and name not in done]
    skip_reason: str | None = None
    for name, gate in gates.items():
        if name not in cfg.gates:
            continue
        if name in done:
            results.append(done[name])
            skip_reason = skip_reason or _not_ready(done[name])
            continue
        if skip_reason is not None:
            judged(GateResult(name=name, status=Status.SKIP, summary=skip_reason))
            continue
        waiting = _correctness_failed(results) if name in AFTER_CORRECTNESS else None
        if waiting is not None:
            judged(GateResult(name=name, status=Status.SKIP, summary=waiting))
            continue

        def gate_progress(done: int, total: int, label: str, _name: str = name) -> None:
            if progress is not None:
                progress(_name, done, total, label)

        gate_progress(0, 1, "")
        planned = budget.plan(name, todo[todo.index(name) :], cfg) if budget else None
        started = time.perf_counter()
        result = await gate(pair, planned.cfg if planned else cfg, gate_progress)
        spent = counting.time(name, time.perf_counter() - started)
        if planned is not None:
            spent = spent.model_copy(update={"share": planned.share, "plan": planned.text})
        result = result.model_copy(update={"time": spent})
        if budget is not None:
            budget.ran(name, result)
        skip_reason = _not_ready(result) or (None if cfg.complete else failed_fast(result))
        judged(result)
        gate_progress(1, 1, str(result.status))
    return results


def after_deadline(
    cfg: GateConfig, gates: Mapping[str, GateRunner], finished: Sequence[GateResult]
) -> list[GateResult]:
    """The results of the gates the run deadline cut off: the first unfinished gate was running
    (gates only yield to the event loop inside a gate), the ones after it never started."""
    seen = {r.name for r in finished}
    todo = [name for name in gates if name in cfg.gates and name not in seen]
    expired = f"the run deadline of {cfg.run_deadline_s:g} s expired during this gate"
    return [
        GateResult(name=name, status=Status.INCONCLUSIVE, summary=expired)
        if i == 0
        else GateResult(
            name=name, status=Status.SKIP, summary="not started: the run deadline expired"
        )
        for i, name in enumerate(todo)
    ]
