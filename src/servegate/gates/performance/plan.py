"""What the performance gate sends and what it keeps: the interleaved block plan and its evidence.

Both sides get the same synthetic temperature-0 requests: request i of a run is the same body on
either side (`servegate.load.workload`), warm-up first (indices 0…W-1, not measured), then block
k on each side sends indices W + k·R … W + (k+1)·R − 1 at a fixed closed-loop concurrency. Blocks
alternate sides in A B, B A, A B, … order, so a drift of the shared machine that grows or shrinks
over the run falls on both sides alike. With a baseline replica (a second baseline server) it runs
the same blocks as a third side, every order of the three taking its turn: the baseline against
its replica is the A/A floor of each metric, measured on the same machine at the same times. The
first block's prompts are then answered alone, one at a time, by baseline and candidate: the
reference for correctness under load. With an SLO, a capacity sweep follows: one closed-loop step
per concurrency of `capacity_concurrency` on each side (step j sends indices C + j·Q … C + (j+1)·Q
− 1 on either side, C the first index after the most blocks the run may send, Q
`capacity_requests`), the side that goes first alternating from step to step.

The blocks run in looks (`look_blocks`): `blocks` a side first, then, while the judgement leaves
TTFT, E2EL or throughput undecided, `LOOK_BLOCKS` more a side, continuing the same A B, B A order,
up to `max_blocks` a side.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from servegate.config.models import PerformanceConfig
from servegate.endpoints.errors import ErrorCategory
from servegate.endpoints.types import Completion
from servegate.load.bench import evaluate_step
from servegate.load.driver import Exchange, StepBounds, StepEvidence
from servegate.load.metrics import RequestMeasure, measure
from servegate.load.workload import SyntheticWorkload, WorkItem
from servegate.stats.distribution import DistributionSummary

__all__ = [
    "NAME",
    "REPLICA",
    "SIDES",
    "AloneAnswer",
    "Block",
    "CapacityStep",
    "PerformanceEvidence",
    "SideLoad",
    "all_timed_out",
    "block_bounds",
    "block_order",
    "blocks_planned",
    "capacity_bounds",
    "capacity_first_index",
    "first_index",
    "in_flight_counts",
    "look_blocks",
    "max_blocks",
    "side_load",
    "side_load_of",
    "warmup_count",
    "workload",
]

NAME = "performance"
SIDES = ("baseline", "candidate")
REPLICA = "replica"
# The six orders of three sides, each side first, second and third twice, and each order's
# mirror next to it, so six blocks cancel a drift that grows or shrinks over the run.
_ORDERS3 = ((0, 1, 2), (2, 1, 0), (1, 2, 0), (0, 2, 1), (2, 0, 1), (1, 0, 2))


def workload(settings: PerformanceConfig) -> SyntheticWorkload:
    """Greedy synthetic requests: answers can then be compared with the same prompt alone."""
    return SyntheticWorkload(
        input_tokens=settings.input_tokens,
        output_tokens=settings.output_tokens,
        seed=settings.seed,
        temperature=0.0,
    )


def warmup_count(settings: PerformanceConfig) -> int:
    return settings.concurrency if settings.warmup is None else settings.warmup


def first_index(settings: PerformanceConfig, block: int) -> int:
    """The run-wide index of block `block`'s first request (the same on both sides)."""
    return warmup_count(settings) + block * settings.requests_per_block


# Blocks a side added by each look after the first: a pair keeps A B, B A balanced.
LOOK_BLOCKS = 2


def max_blocks(settings: PerformanceConfig) -> int:
    """The most blocks a side the run may send: `max_blocks`, never fewer than `blocks`."""
    return max(settings.blocks, settings.max_blocks)


def look_blocks(settings: PerformanceConfig) -> tuple[int, ...]:
    """Blocks a side at each planned look: `blocks`, then `LOOK_BLOCKS` more each look, the
    last one `max_blocks` (6, 8, 10, 12 by default)."""
    most = max_blocks(settings)
    out = [settings.blocks]
    while out[-1] < most:
        out.append(min(out[-1] + LOOK_BLOCKS, most))
    return tuple(out)


def blocks_planned(blocks: Sequence[Block]) -> int:
    """Blocks a side the run planned so far (sent or not): the highest block number + 1."""
    return max((b.number for b in blocks), default=-1) + 1


def block_order(
    blocks: int, *, replica: bool = False, start: int = 0
) -> tuple[tuple[str, int], ...]:
    """(side, block) of blocks `start` … `blocks` − 1 in the order they run: A B, B A, A B, …
    (each pair counterbalanced); with a replica, the six orders of baseline, candidate and
    replica in turn. A later look continues the order where the earlier one stopped."""
    order: list[tuple[str, int]] = []
    for k in range(start, blocks):
        if replica:
            sides = (*SIDES, REPLICA)
            order += [(sides[i], k) for i in _ORDERS3[k % len(_ORDERS3)]]
            continue
        first, second = SIDES if k % 2 == 0 else SIDES[::-1]
        order += [(first, k), (second, k)]
    return tuple(order)


def block_bounds(settings: PerformanceConfig, requests: int, deadline_s: float) -> StepBounds:
    """No warm-up inside a block; the duration lets every round of requests run to its deadline,
    so a block ends by its request count unless the server hangs."""
    rounds = math.ceil(requests / settings.concurrency)
    return StepBounds(
        requests=requests, duration_s=rounds * deadline_s, warmup=0, deadline_s=deadline_s
    )


def all_timed_out(step: StepEvidence) -> bool:
    """Every measured request of the step timed out (or stalled): the side looks hung."""
    errors = [x.completion.error for x in step.exchanges]
    return bool(errors) and all(e is not None and e.hung for e in errors)


def capacity_first_index(settings: PerformanceConfig, step: int) -> int:
    """The run-wide index of capacity step `step`'s first request (the same on both sides)."""
    return first_index(settings, max_blocks(settings)) + step * settings.capacity_requests


def capacity_bounds(settings: PerformanceConfig, concurrency: int, deadline_s: float) -> StepBounds:
    """No warm-up (the sides are warm after the blocks); ends by its request count unless the
    server hangs, as a block does."""
    requests = settings.capacity_requests
    rounds = math.ceil(requests / concurrency)
    return StepBounds(
        requests=requests, duration_s=rounds * deadline_s, warmup=0, deadline_s=deadline_s
    )


@dataclass(frozen=True)
class CapacityStep:
    """One step of one side's capacity sweep: what its requests did, or why it was not sent
    (`hung`: the side timed out on everything, here or earlier in the gate)."""

    side: str
    concurrency: int
    step: StepEvidence | None
    not_sent: str = ""
    hung: bool = False


@dataclass(frozen=True)
class ServedPilot:
    """The baseline at one concurrency before the blocks: how many of its answers came back
    incomplete (cut short, empty), which says whether it serves that concurrency at all."""

    concurrency: int
    answers: int
    incomplete: int
    example: str = ""  # one incomplete answer's error, as recorded

    @property
    def share(self) -> float:
        return self.incomplete / self.answers if self.answers else 0.0


def incomplete(answer: Completion) -> str | None:
    """Why an answer under load is incomplete (a stream cut short, an empty answer), or None.
    A server that interrupts the request in flight for a newer one (stock llama-cpp-python's
    default) returns exactly these."""
    error = answer.error
    if error is not None and error.category is ErrorCategory.TRUNCATED:
        return f"truncated: {error.message}"
    if answer.ok and not answer.text and not answer.tool_calls:
        return "empty answer"
    return None


def whole_answers(step: StepEvidence) -> list[Exchange]:
    """The answers of `step` that came back whole: no error, not cut short, not empty."""
    return [x for x in step.exchanges if x.completion.ok and incomplete(x.completion) is None]


def pilot_of(concurrency: int, step: StepEvidence) -> ServedPilot:
    whys = [w for x in step.exchanges if (w := incomplete(x.completion)) is not None]
    return ServedPilot(concurrency, len(step.exchanges), len(whys), whys[0] if whys else "")


@dataclass(frozen=True)
class Block:
    """One block of one side: what its measured requests did, or why it was not sent."""

    side: str
    number: int
    step: StepEvidence | None
    not_sent: str = ""


@dataclass(frozen=True)
class AloneAnswer:
    """A prompt of the first block answered alone (after the isolation request)."""

    index: int
    item: WorkItem
    completion: Completion


@dataclass(frozen=True)
class PerformanceEvidence:
    settings: PerformanceConfig
    workload: SyntheticWorkload
    blocks: tuple[Block, ...]  # in the order they ran
    warmup: dict[str, StepEvidence | None]
    alone: dict[str, tuple[AloneAnswer, ...]]
    baseline_url: str
    candidate_url: str
    model: str | None
    replica_url: str | None = None  # a second baseline server ran the same blocks (A/A floor)
    capacity: tuple[CapacityStep, ...] = ()  # the sweep in the order it ran; () without an SLO
    # The baseline at the asked concurrency, then lower ones until it served every answer whole:
    # the blocks ran at `settings.concurrency`, the last pilot's (asked: the first pilot's).
    pilots: tuple[ServedPilot, ...] = ()
    # When the blocks ran below the asked concurrency: the first block's prompts sent again at
    # the asked one on each side. Their whole answers still say whether concurrency changes an
    # answer (a batch-only corruption never shows at concurrency 1).
    concurrent: dict[str, StepEvidence | None] = field(default_factory=dict)
    # Why the looks stopped before a check decided, when it was time (`looks_within_s`).
    looks_stopped: str | None = None

    def side_blocks(self, side: str) -> list[StepEvidence]:
        """The measured blocks of `side` that were sent, by block number."""
        return sent_blocks(self.blocks, side)

    def gave_up(self, side: str) -> list[str]:
        return [b.not_sent for b in self.blocks if b.side == side and b.not_sent]


@dataclass
class SideLoad:
    """One side's measured requests, in block order, with each one's requests in flight."""

    name: str
    exchanges: list[Exchange] = field(default_factory=list)
    measures: list[RequestMeasure] = field(default_factory=list)
    in_flight: dict[int, int] = field(default_factory=dict)  # request index -> most in flight
    block_rates: list[float] = field(default_factory=list)  # output tokens/s per block
    blocks: list[list[RequestMeasure]] = field(default_factory=list)  # measures, per block
    client_bound: list[str] = field(default_factory=list)

    def values(self, metric: str) -> list[float]:
        return [v for m in self.measures if m.ok and (v := getattr(m, metric)) is not None]

    def block_p95s(self, metric: str) -> list[float]:
        """The P95 of `metric` within each block that has a value of it, in block order."""
        out = []
        for block in self.blocks:
            values = [v for m in block if m.ok and (v := getattr(m, metric)) is not None]
            p95 = DistributionSummary.from_values(values).p95
            if p95 is not None:
                out.append(p95)
        return out

    @property
    def failed(self) -> int:
        return sum(not m.ok for m in self.measures)


def in_flight_counts(block: Sequence[Exchange]) -> dict[int, int]:
    """For each request, the most requests of its block in flight at its start or any later
    start before it finished (itself included)."""
    out = {}
    for x in block:
        starts = [y.started_ns for y in block if x.started_ns <= y.started_ns < x.finished_ns]
        out[x.index] = max(
            (sum(1 for y in block if y.started_ns <= t < y.finished_ns) for t in starts),
            default=1,
        )
    return out


def sent_blocks(blocks: Sequence[Block], side: str) -> list[StepEvidence]:
    """The measured blocks of `side` that were sent, by block number."""
    sent = [b for b in blocks if b.side == side and b.step is not None]
    return [b.step for b in sorted(sent, key=lambda b: b.number) if b.step is not None]


def side_load(ev: PerformanceEvidence, name: str) -> SideLoad:
    """Everything `evaluate` needs of one side's measured blocks."""
    return side_load_of(ev.blocks, name)


def side_load_of(blocks: Sequence[Block], name: str) -> SideLoad:
    """Everything the judgement needs of one side's measured blocks among `blocks`."""
    side = SideLoad(name)
    for number, step in enumerate(sent_blocks(blocks, name)):
        side.exchanges += step.exchanges
        block = [measure(x.completion) for x in step.exchanges]
        side.blocks.append(block)
        side.measures += block
        side.in_flight.update(in_flight_counts(step.exchanges))
        result = evaluate_step(step, None)
        rate = result.metrics.output_tokens_per_s.value
        if result.metrics.sent and rate is not None:
            side.block_rates.append(rate)
        side.client_bound += [f"block {number}: {r}" for r in result.client.reasons]
    return side
