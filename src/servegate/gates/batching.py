"""Whether a server answers several requests at once about as fast as one (it batches them).

A batching server (vLLM, llama.cpp's server with parallel slots) answers four short requests
sent together in little more than the time of one; a server that serves one request at a time
(llama-cpp-python) takes about four times as long for the last of them. A gate that sends its
probes one after the other leaves a batching server idle most of the time, so golden sends as
many probes at once as both sides batch — and the baseline's own paths (streamed, cache hit)
go out in the same flow, so the noise they measure is the noise of answers sent that way (vLLM
is not batch-invariant: an answer may change with the requests beside it).

The measurement: the same short greedy request sent alone, then `width` copies at once, on one
side; the side batches when every copy was answered and all of them took at most
`BATCHED_WITHIN` × the time of the lone one (wall-clock on this client). Its requests are
recorded like any other gate request.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import asdict, dataclass

from servegate.endpoints.protocol import Endpoint
from servegate.endpoints.types import Completion
from servegate.gates.pair import EndpointPair

WIDTH = 4
# Four requests served one at a time: the last waits for three (≈ 4×). Batched: ≈ 1-1.5×.
BATCHED_WITHIN = 2.0
REQUEST = {
    "messages": [{"role": "user", "content": "Count from one to twelve in words."}],
    "max_tokens": 16,
    "temperature": 0,
}


@dataclass(frozen=True)
class Batching:
    """One side's measurement: seconds for one request alone and for `width` at once."""

    side: str
    width: int
    alone_s: float | None
    together_s: float | None
    batches: bool
    why: str

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def judge(
    side: str, width: int, alone: tuple[Completion, float], together: tuple[list[Completion], float]
) -> Batching:
    """Whether `side` batched: every answer in, and `width` at once within BATCHED_WITHIN × the
    seconds of one alone (each a wall-clock time on this client, queueing included)."""
    (lone, lone_s), (answers, together_s) = alone, together
    failed = sum(not r.ok for r in [lone, *answers])
    if failed or not answers:
        why = f"{failed} of {len(answers) + 1} measuring requests not answered: one at a time"
        return Batching(side, width, lone_s, together_s, False, why)
    ratio = together_s / max(lone_s, 1e-6)
    batches = ratio <= BATCHED_WITHIN
    verb = "batches" if batches else "serves one at a time"
    why = (
        f"{verb}: {width} requests at once took {together_s:.2f} s, {ratio:.1f}× the "
        f"{lone_s:.2f} s of one alone (batched when within {BATCHED_WITHIN:g}×)"
    )
    return Batching(side, width, lone_s, together_s, batches, why)


async def measure(
    pair: EndpointPair, endpoint: Endpoint, *, gate: str, deadline_s: float, width: int = WIDTH
) -> Batching:
    """One side's batching, measured with `width` + 1 short requests (recorded under `gate`)."""

    async def one(label: str) -> Completion:
        return await pair.send(
            endpoint, "chat", REQUEST, gate=gate, probe=f"batching:{label}",
            deadline_s=deadline_s, isolate=False,
        )  # fmt: skip

    began = time.perf_counter()
    alone = await one("alone")
    lone_s = time.perf_counter() - began
    began = time.perf_counter()
    together = await asyncio.gather(*(one(f"together-{i}") for i in range(width)))
    return judge(
        endpoint.name, width, (alone, lone_s), (list(together), time.perf_counter() - began)
    )


async def measure_sides(pair: EndpointPair, *, gate: str, deadline_s: float) -> dict[str, Batching]:
    """Each side's batching, measured on its own, the baseline first; only the baseline's when
    both sides are one server (the candidate then batches as the baseline does)."""
    sides = [("baseline", pair.baseline)]
    if pair.candidate is not pair.baseline:
        sides.append(("candidate", pair.candidate))
    return {name: await measure(pair, ep, gate=gate, deadline_s=deadline_s) for name, ep in sides}
