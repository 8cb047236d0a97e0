"""Gate 5, performance: not slower, measured honestly — and still correct under load.

The load comes from `servegate.load` (the generator behind `servegate bench`): closed-loop blocks
of greedy synthetic requests, interleaved between the sides (performance_plan.py). Every request
is recorded and every answer checked. `evaluate` (performance_judgement.py) compares TTFT, TPOT
and E2EL P95, output throughput and error rate with a Mann-Whitney test plus an effect band and
a bootstrap interval of the ratio — widened by the baseline's own A/A deviation when a baseline
replica ran the same blocks — and compares each side's answers under load with the same
prompts answered alone, the baseline's own disagreement being the noise floor. With an SLO
(`performance.slo`) a capacity sweep follows, and the highest concurrency each side served
within it is compared (performance_capacity.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from servegate.config.models import GateConfig
from servegate.config.slo import SLO
from servegate.endpoints.protocol import Endpoint
from servegate.gates.pair import EndpointPair
from servegate.gates.performance.judgement import evaluate
from servegate.gates.performance.plan import (
    NAME,
    REPLICA,
    SIDES,
    AloneAnswer,
    Block,
    CapacityStep,
    PerformanceEvidence,
    ServedPilot,
    all_timed_out,
    block_bounds,
    block_order,
    capacity_bounds,
    capacity_first_index,
    first_index,
    pilot_of,
    warmup_count,
    whole_answers,
    workload,
)
from servegate.load.arrival import closed_loop
from servegate.load.bench import evaluate_step
from servegate.load.driver import StepEvidence, for_load, run_step
from servegate.load.server_metrics import endpoint_scrape
from servegate.load.sweep import meets_slo
from servegate.load.workload import WorkSource, synthetic_source

__all__ = ["NAME", "PerformanceEvidence", "collect", "evaluate"]

Progress = Callable[[int, int, str], None]


async def _sweep(
    pair: EndpointPair,
    cfg: GateConfig,
    slo: SLO,
    source: WorkSource,
    stopped: dict[str, str],
    step: Callable[[str], None],
) -> tuple[CapacityStep, ...]:
    """One closed-loop step per concurrency on each side, the side going first alternating.

    A side stops climbing after its first step that missed the SLO (every step below it met
    it), or once every request of a step timed out; a side stopped earlier in the gate is sent
    nothing. The steps not sent say why, for `evaluate`."""
    settings = cfg.performance
    sides: dict[str, Endpoint] = {"baseline": pair.baseline, "candidate": pair.candidate}
    halted = {name: (why, True) for name, why in stopped.items() if name in sides}
    out: list[CapacityStep] = []
    for j, n in enumerate(settings.capacity_concurrency):
        for name in SIDES if j % 2 == 0 else SIDES[::-1]:
            if name in halted:
                why, hung = halted[name]
                out.append(CapacityStep(name, n, None, why, hung))
            else:
                got = await run_step(
                    pair.recording(for_load(sides[name], n), gate=NAME, probe=f"capacity:c{n}"),
                    source,
                    closed_loop(n),
                    capacity_bounds(settings, n, cfg.request_deadline_s),
                    first_index=capacity_first_index(settings, j),
                )
                out.append(CapacityStep(name, n, got))
                if all_timed_out(got):
                    why = f"not sent: every request of {name} at concurrency {n} timed out"
                    halted[name] = (why, True)
                elif meets_slo(evaluate_step(got, slo)) is False:
                    halted[name] = (f"not sent: {name} missed the SLO at concurrency {n}", False)
            step(f"{name} capacity c{n}")
    return tuple(out)


async def collect(
    pair: EndpointPair, cfg: GateConfig, *, progress: Progress | None = None
) -> PerformanceEvidence:
    """Warm up each side, run the interleaved blocks, then the first block's prompts alone,
    then (with an SLO) the capacity sweep.

    A side whose whole block timed out (or that an earlier gate found hung) is sent no further
    blocks; the evidence says so and `evaluate` judges what that means."""
    settings = cfg.performance
    spec = workload(settings)
    source = synthetic_source(spec, pair.model)
    dl = cfg.request_deadline_s
    sides: dict[str, Endpoint] = {"baseline": pair.baseline, "candidate": pair.candidate}
    if pair.replica is not None:
        sides[REPLICA] = pair.replica
    stopped: dict[str, str] = {
        name: f"not sent: {name} was hung before this gate"
        for name, ep in sides.items()
        if pair.hung(ep)
    }
    order = block_order(settings.blocks, replica=pair.replica is not None)
    alone_n = min(settings.isolated_prompts, settings.requests_per_block)
    sweep_steps = len(SIDES) * len(settings.capacity_concurrency) if settings.slo else 0
    total, done = len(order) + len(sides) + len(SIDES) * alone_n + sweep_steps, 0

    def step(label: str) -> None:
        nonlocal done
        done += 1
        if progress is not None:
            progress(done, total, label)

    pilots: tuple[ServedPilot, ...] = ()
    if "baseline" not in stopped:
        pilots = await _served(pair, cfg, source, cfg.policy.served_incomplete_share_max)
        settings = settings.model_copy(update={"concurrency": pilots[-1].concurrency})
        total += len(pilots) + (len(SIDES) if _lowered(pilots) else 0)
        done += len(pilots)
    arrival = closed_loop(settings.concurrency)
    count = warmup_count(settings)

    def load_client(name: str) -> Endpoint:  # no retries, a connection per stream
        return for_load(sides[name], settings.concurrency)

    async def warm(name: str) -> StepEvidence | None:
        """Not measured: the sides warm up at the same time when the pair allows it."""
        got = None
        if count and name not in stopped:
            tagged = pair.recording(load_client(name), gate=NAME, probe="load:warmup")
            got = await run_step(
                tagged, source, arrival, block_bounds(settings, count, dl), first_index=0
            )
        step(f"{name} warm-up")
        return got

    if pair.at_once:
        warmed = await asyncio.gather(*(warm(name) for name in sides))
    else:
        warmed = [await warm(name) for name in sides]
    warmup: dict[str, StepEvidence | None] = dict(zip(sides, warmed, strict=True))
    blocks: list[Block] = []
    for name, k in order:
        if name in stopped:
            blocks.append(Block(name, k, None, stopped[name]))
        else:
            tagged = pair.recording(load_client(name), gate=NAME, probe=f"load:block{k}")
            bounds = block_bounds(settings, settings.requests_per_block, dl)
            every_s = settings.server_metrics_interval_s
            evidence = await run_step(
                tagged,
                source,
                arrival,
                bounds,
                first_index=first_index(settings, k),
                # Not recorded: a scrape is no request of the comparison.
                server=endpoint_scrape(sides[name]) if every_s is not None else None,
                server_interval_s=every_s or 1.0,
            )
            blocks.append(Block(name, k, evidence))
            if all_timed_out(evidence):
                stopped[name] = f"not sent: every request of {name} block {k} timed out"
        step(f"{name} block {k}")
    # The replica's part is the A/A floor of the timings; agreement under load has its own floor
    # (the baseline alone vs under load), so the replica answers nothing alone.
    first = first_index(settings, 0)
    concurrent: dict[str, StepEvidence | None] = {}
    if _lowered(pilots):
        # The blocks' prompts again at the asked concurrency. A server that cuts the stream in
        # flight for each newer request answers few of them whole (stock llama-cpp-python: 1 of
        # 8, 6 of 48): as many as the blocks sent, so that some are whole while others wait.
        asked = pilots[0].concurrency
        count = settings.blocks * settings.requests_per_block
        for name in SIDES:
            concurrent[name] = None
            if name not in stopped:
                tagged = pair.recording(
                    for_load(sides[name], asked), gate=NAME, probe=f"load:concurrent:c{asked}"
                )
                bounds = block_bounds(settings, count, dl)
                concurrent[name] = await run_step(
                    tagged, source, closed_loop(asked), bounds, first_index=first
                )
            step(f"{name} at concurrency {asked}")

    def alone_indices(name: str) -> list[int]:
        """The first block's prompts, and those answered whole at the asked concurrency."""
        own = list(range(first, first + alone_n))
        got = concurrent.get(name)
        return own + sorted({x.index for x in whole_answers(got)} - set(own)) if got else own

    total += sum(len(alone_indices(name)) - alone_n for name in SIDES)

    async def alone_on(name: str) -> list[AloneAnswer]:
        """Each prompt alone on one side (the sides at the same time when the pair allows it:
        they are different servers, and each request is isolated on its own)."""
        out = []
        for index in alone_indices(name):
            item = source(index)
            if name not in stopped:
                answer = await pair.send(
                    sides[name], item.api, item.body, gate=NAME, probe=f"alone:{item.label}",
                    deadline_s=dl,
                )  # fmt: skip
                out.append(AloneAnswer(index, item, answer))
            step(f"{name} alone {index}")
        return out

    alone = dict(
        zip(
            SIDES,
            await pair.sides(lambda: alone_on(SIDES[0]), lambda: alone_on(SIDES[1])),
            strict=True,
        )
    )
    capacity: tuple[CapacityStep, ...] = ()
    if settings.slo is not None:
        capacity = await _sweep(pair, cfg, settings.slo, source, stopped, step)
    return PerformanceEvidence(
        settings=settings,
        workload=spec,
        blocks=tuple(blocks),
        warmup=warmup,
        alone={name: tuple(answers) for name, answers in alone.items()},
        baseline_url=pair.baseline.base_url,
        candidate_url=pair.candidate.base_url,
        model=pair.model,
        replica_url=None if pair.replica is None else pair.replica.base_url,
        capacity=capacity,
        pilots=pilots,
        concurrent=concurrent,
    )


def _lowered(pilots: tuple[ServedPilot, ...]) -> bool:
    """The blocks run below the asked concurrency: the baseline did not serve it whole."""
    return bool(pilots) and pilots[-1].concurrency < pilots[0].concurrency


async def _served(
    pair: EndpointPair, cfg: GateConfig, source: WorkSource, share_max: float
) -> tuple[ServedPilot, ...]:
    """The baseline at the asked concurrency, then at half of it, … until it answers every
    request whole (or at concurrency 1): a server that interrupts the request in flight for a
    newer one cannot be measured at a concurrency it does not serve, and "too few samples" is
    no finding. Not measured: these answers are the baseline's warm-up too."""
    settings = cfg.performance
    n = settings.concurrency
    pilots: list[ServedPilot] = []
    while True:
        step = await run_step(
            pair.recording(for_load(pair.baseline, n), gate=NAME, probe=f"load:pilot:c{n}"),
            source,
            closed_loop(n),
            block_bounds(settings, max(n, warmup_count(settings)), cfg.request_deadline_s),
            first_index=0,
        )
        pilots.append(pilot_of(n, step))
        if pilots[-1].share <= share_max or n == 1 or all_timed_out(step):
            return tuple(pilots)
        n = max(1, n // 2)
