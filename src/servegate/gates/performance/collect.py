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
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise

from servegate.config.models import GateConfig, PerformanceConfig
from servegate.config.slo import SLO
from servegate.endpoints.protocol import Endpoint
from servegate.endpoints.recording import part
from servegate.gates.pair import EndpointPair
from servegate.gates.performance.judgement import evaluate
from servegate.gates.performance.looks import undecided
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
    look_blocks,
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
BLOCKS_PART = "load blocks"


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
    sides = _load_sides(pair)
    stopped: dict[str, str] = {
        name: f"not sent: {name} was hung before this gate"
        for name, ep in sides.items()
        if pair.hung(ep)
    }
    order = block_order(settings.blocks, replica=pair.replica is not None)
    alone_n = min(settings.isolated_prompts, settings.requests_per_block)
    sweep_steps = len(SIDES) * len(settings.capacity_concurrency) if settings.slo else 0
    steps = _Steps(progress, len(order) + len(sides) + len(SIDES) * alone_n + sweep_steps)
    pilots: tuple[ServedPilot, ...] = ()
    if "baseline" not in stopped:
        with part("the baseline's pilots"):
            pilots = await _served(pair, cfg, source, cfg.policy.served_incomplete_share_max)
        settings = settings.model_copy(update={"concurrency": pilots[-1].concurrency})
        steps.total += len(pilots) + (len(SIDES) if _lowered(pilots) else 0)
        steps.done += len(pilots)
    load = _Load(pair, sides, source, settings, cfg.request_deadline_s, stopped, steps)
    with part("load warm-up"):
        warmup = await load.warm_up()
    with part(BLOCKS_PART):
        started = time.monotonic()
        blocks = await load.blocks(order)
        per_block_s = (time.monotonic() - started) / max(1, len(order))
        more, looks_stopped = await _more_looks(
            load, blocks, cfg, per_block_s, replica=pair.replica is not None
        )
        blocks += more
    with part("load at the asked concurrency"):
        concurrent = (
            await load.at_asked_concurrency(pilots[0].concurrency) if _lowered(pilots) else {}
        )
    # The replica's part is the A/A floor of the timings; agreement under load has its own floor
    # (the baseline alone vs under load), so the replica answers nothing alone.
    with part("answers alone"):
        alone = await load.alone(_alone_indices(settings, alone_n, concurrent), alone_n)
    capacity: tuple[CapacityStep, ...] = ()
    if settings.slo is not None:
        with part("capacity sweep"):
            capacity = await _sweep(pair, cfg, settings.slo, source, stopped, steps.step)
    return PerformanceEvidence(
        settings=settings,
        workload=spec,
        blocks=tuple(blocks),
        warmup=warmup,
        alone=alone,
        baseline_url=pair.baseline.base_url,
        candidate_url=pair.candidate.base_url,
        model=pair.model,
        replica_url=None if pair.replica is None else pair.replica.base_url,
        capacity=capacity,
        pilots=pilots,
        concurrent=concurrent,
        looks_stopped=looks_stopped,
    )


async def _more_looks(
    load: _Load, blocks: list[Block], cfg: GateConfig, per_block_s: float, *, replica: bool
) -> tuple[list[Block], str | None]:
    """The looks after the first: while TTFT, E2EL or throughput is undecided on the blocks so
    far (looks.undecided, the rule `evaluate` reports), the next planned look's blocks a
    side, continuing the interleaved order, up to `max_blocks` — and, with `looks_within_s`,
    only while the next look fits the seconds left of it, at the first look's `per_block_s`.
    Returns the blocks added, and why the looks stopped for time (None: they did not)."""
    done = list(blocks)
    added: list[Block] = []
    within = cfg.performance.looks_within_s
    spent = 0.0
    planned = look_blocks(cfg.performance)
    for before, after in pairwise(planned):
        if not undecided(done, cfg.performance, cfg.policy, replica=replica):
            break
        if any(name in load.stopped for name in SIDES):
            break  # a side sent nothing more: more blocks of the other decide nothing
        order = block_order(after, replica=replica, start=before)
        need = per_block_s * len(order)
        if within is not None and spent + need > within:
            return added, (
                f"the look at {after} blocks a side would take about {need:.0f} s (the first "
                f"look's {per_block_s:.1f} s a block), {max(0.0, within - spent):.0f} s of the "
                f"{within:.0f} s for later looks (performance.looks_within_s, set by --budget) "
                "were left"
            )
        load.steps.total += len(order)
        started = time.monotonic()
        more = await load.blocks(order)
        spent += time.monotonic() - started
        done += more
        added += more
    return added, None


def _load_sides(pair: EndpointPair) -> dict[str, Endpoint]:
    """Baseline, candidate and the replica when there is one, by name."""
    sides: dict[str, Endpoint] = {"baseline": pair.baseline, "candidate": pair.candidate}
    if pair.replica is not None:
        sides[REPLICA] = pair.replica
    return sides


@dataclass
class _Steps:
    """The gate's progress: steps done of the steps planned, told to `progress` as each ends."""

    progress: Progress | None
    total: int
    done: int = 0

    def step(self, label: str) -> None:
        """One more step is done."""
        self.done += 1
        if self.progress is not None:
            self.progress(self.done, self.total, label)


def _alone_indices(
    settings: PerformanceConfig, alone_n: int, concurrent: Mapping[str, StepEvidence | None]
) -> dict[str, list[int]]:
    """Per side, the prompts it answers alone: the first block's, and those it answered whole
    at the asked concurrency."""
    first = first_index(settings, 0)
    own = list(range(first, first + alone_n))
    out = {}
    for name in SIDES:
        got = concurrent.get(name)
        out[name] = own + sorted({x.index for x in whole_answers(got)} - set(own)) if got else own
    return out


@dataclass(frozen=True)
class _Load:
    """What the load steps share: the sides, the work, the settings the blocks run with, the
    sides stopped (and why: a side stopped is sent nothing more) and the gate's progress."""

    pair: EndpointPair
    sides: dict[str, Endpoint]
    source: WorkSource
    settings: PerformanceConfig
    deadline_s: float
    stopped: dict[str, str]
    steps: _Steps

    def client(self, name: str) -> Endpoint:
        """The side's load client: no retries, a connection per stream."""
        return for_load(self.sides[name], self.settings.concurrency)

    async def warm_up(self) -> dict[str, StepEvidence | None]:
        """Each side's warm-up, not measured: at the same time when the pair allows it."""
        count = warmup_count(self.settings)

        async def warm(name: str) -> StepEvidence | None:
            got = None
            if count and name not in self.stopped:
                tagged = self.pair.recording(self.client(name), gate=NAME, probe="load:warmup")
                bounds = block_bounds(self.settings, count, self.deadline_s)
                got = await run_step(
                    tagged, self.source, closed_loop(self.settings.concurrency), bounds,
                    first_index=0,
                )  # fmt: skip
            self.steps.step(f"{name} warm-up")
            return got

        if self.pair.at_once:
            warmed = await asyncio.gather(*(warm(name) for name in self.sides))
        else:
            warmed = [await warm(name) for name in self.sides]
        return dict(zip(self.sides, warmed, strict=True))

    async def blocks(self, order: Sequence[tuple[str, int]]) -> list[Block]:
        """The measured blocks in their interleaved order; a side whose whole block timed out
        is sent no further blocks."""
        settings = self.settings
        every_s = settings.server_metrics_interval_s
        out: list[Block] = []
        for name, k in order:
            if name in self.stopped:
                out.append(Block(name, k, None, self.stopped[name]))
            else:
                tagged = self.pair.recording(self.client(name), gate=NAME, probe=f"load:block{k}")
                evidence = await run_step(
                    tagged,
                    self.source,
                    closed_loop(settings.concurrency),
                    block_bounds(settings, settings.requests_per_block, self.deadline_s),
                    first_index=first_index(settings, k),
                    # Not recorded: a scrape is no request of the comparison.
                    server=endpoint_scrape(self.sides[name]) if every_s is not None else None,
                    server_interval_s=every_s or 1.0,
                )
                out.append(Block(name, k, evidence))
                if all_timed_out(evidence):
                    self.stopped[name] = f"not sent: every request of {name} block {k} timed out"
            self.steps.step(f"{name} block {k}")
        return out

    async def at_asked_concurrency(self, asked: int) -> dict[str, StepEvidence | None]:
        """The blocks' prompts again at the asked concurrency, which the blocks ran below.

        A server that cuts the stream in flight for each newer request answers few of them
        whole (stock llama-cpp-python: 1 of 8, 6 of 48): as many as the blocks sent, so that
        some are whole while others wait."""
        settings = self.settings
        count = settings.blocks * settings.requests_per_block
        out: dict[str, StepEvidence | None] = {}
        for name in SIDES:
            out[name] = None
            if name not in self.stopped:
                tagged = self.pair.recording(
                    for_load(self.sides[name], asked), gate=NAME, probe=f"load:concurrent:c{asked}"
                )
                bounds = block_bounds(settings, count, self.deadline_s)
                out[name] = await run_step(
                    tagged, self.source, closed_loop(asked), bounds,
                    first_index=first_index(settings, 0),
                )  # fmt: skip
            self.steps.step(f"{name} at concurrency {asked}")
        return out

    async def alone(
        self, indices: Mapping[str, list[int]], planned: int
    ) -> dict[str, tuple[AloneAnswer, ...]]:
        """Each side's prompts `indices` alone, one at a time (`planned` each were counted in
        the progress); the sides at the same time when the pair allows it: they are different
        servers, and each request is isolated on its own."""
        self.steps.total += sum(len(indices[name]) - planned for name in SIDES)

        async def alone_on(name: str) -> tuple[AloneAnswer, ...]:
            out = []
            for index in indices[name]:
                item = self.source(index)
                if name not in self.stopped:
                    answer = await self.pair.send(
                        self.sides[name], item.api, item.body, gate=NAME,
                        probe=f"alone:{item.label}", deadline_s=self.deadline_s,
                    )  # fmt: skip
                    out.append(AloneAnswer(index, item, answer))
                self.steps.step(f"{name} alone {index}")
            return tuple(out)

        answers = await self.pair.sides(lambda: alone_on(SIDES[0]), lambda: alone_on(SIDES[1]))
        return dict(zip(SIDES, answers, strict=True))


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
