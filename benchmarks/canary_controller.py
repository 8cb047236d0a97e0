"""What the canary controller costs the proxy: per request (choose + observe) and per interval
(the judgement), and how long the proxy's event loop stalls while an interval is judged.

    python benchmarks/canary_controller.py [--sizes 1000,5000,20000,100000] [--repeat 3]

Prints one table; results and the load average go to benchmarks/RESULTS-canary.md.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import time

from servegate.canary.controller import Controller
from servegate.canary.plan import CanaryPlan
from servegate.canary.protocol import RequestObservation
from servegate.config.models import Policy


def answers(n: int, seed: int) -> list[dict[str, float]]:
    rng = random.Random(seed)
    return [
        {
            "error": float(rng.random() < 0.01),
            "timeout": 0.0,
            "garbage": 0.0,
            "empty_output": 0.0,
            "json_parse_failure": float(rng.random() < 0.02),
            "tool_call_parse_failure": 0.0,
            "ttft_ms": rng.lognormvariate(3, 0.3),
            "e2el_ms": rng.lognormvariate(6, 0.3),
            "repeated_token_ratio": rng.random() * 0.05,
            "abnormal_char_ratio": 0.0,
        }
        for _ in range(n)
    ]


def filled(n: int, clock: list[float], interval_s: float = 60.0) -> tuple[Controller, float]:
    """A controller at 50 % with `n` answers in its interval; the per-request cost in µs."""
    controller = Controller(CanaryPlan((50.0, 100.0), interval_s), Policy(), clock=lambda: clock[0])
    rng = random.Random(1)
    data = answers(n, seed=n)
    began = time.perf_counter_ns()
    for metrics in data:
        side = controller.choose(rng.random())
        controller.observe(RequestObservation(side, clock[0], metrics))
    per_request_us = (time.perf_counter_ns() - began) / n / 1e3
    return controller, per_request_us


async def loop_stall_ms(controller: Controller | None, clock: list[float], threaded: bool) -> float:
    """The longest a 1 ms sleeper on the event loop overslept while the interval was judged:
    by run() (in a worker thread) or by tick() called on the loop; with no controller, over the
    same time with nothing judged (the machine's own scheduling noise, the control)."""
    worst = 0.0
    done = asyncio.Event()

    async def sleeper() -> None:
        nonlocal worst
        while not done.is_set():
            began = time.perf_counter()
            await asyncio.sleep(0.001)
            worst = max(worst, (time.perf_counter() - began) * 1e3 - 1)

    task = asyncio.create_task(sleeper())
    await asyncio.sleep(0.05)
    clock[0] += 61
    if controller is None:
        await asyncio.sleep(0.3)
    elif threaded:
        await controller.run(asyncio.Event())  # one interval: 50 % -> complete, then returns
    else:
        controller.tick()
    await asyncio.sleep(0.05)
    done.set()
    await task
    return worst


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="1000,5000,20000,100000")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    # scipy's import is a one-off cost (seconds on this machine): paid before any timing.
    from scipy import stats  # noqa: F401

    print(f"load average at start: {os.getloadavg()}")
    print("| answers in the interval | choose+observe µs/request | judge ms | loop stall ms, "
          "nothing judged (control) | tick() on the loop | run() (thread) |")  # fmt: skip
    print("|---|---|---|---|---|---|")
    for n in sizes:
        per_request, judge, control, inline, threaded = [], [], [], [], []
        for _ in range(args.repeat):
            clock = [0.0]
            controller, us = filled(n, clock)
            per_request.append(us)
            clock[0] = 61
            began = time.perf_counter()
            controller.tick()
            judge.append((time.perf_counter() - began) * 1e3)
            control.append(asyncio.run(loop_stall_ms(None, [0.0], threaded=False)))
            clock = [0.0]
            controller, _ = filled(n, clock)
            inline.append(asyncio.run(loop_stall_ms(controller, clock, threaded=False)))
            clock = [0.0]
            controller, _ = filled(n, clock)
            threaded.append(asyncio.run(loop_stall_ms(controller, clock, threaded=True)))
        print(
            f"| {n:,} | {statistics.median(per_request):.1f} | {statistics.median(judge):.0f} "
            f"| {statistics.median(control):.0f} | {statistics.median(inline):.0f} "
            f"| {statistics.median(threaded):.0f} |"
        )
    print(f"load average at end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
