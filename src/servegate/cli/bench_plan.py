"""The command line of `servegate bench` turned into a checked plan before anything is sent.

Every usage error is one line and exit code 2 (`fail`): a concurrency of 0, an SLO that does not
parse, an unknown workload, a replay file with a broken line.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from servegate.cli.console import fail
from servegate.endpoints.urls import normalise_url
from servegate.load.arrival import Arrival, closed_loop, open_loop, ramp
from servegate.load.replay import ReplayError, ReplayTraffic, read_replay
from servegate.load.result import BenchBounds
from servegate.load.server_metrics import INTERVAL_S, METRICS_PATH
from servegate.load.slo import SLO, SLOError, parse_slo
from servegate.load.sweep import ATTAINMENT
from servegate.load.workload import SyntheticWorkload

EXIT_USAGE = 2
WORKLOADS = ("synthetic", "golden", "replay")


@dataclass(frozen=True)
class Plan:
    """Everything the command line decided, checked before any request is sent."""

    url: str
    model: str | None
    arrivals: tuple[Arrival, ...]
    bounds: BenchBounds
    slo: SLO | None
    workload: str
    synthetic: SyntheticWorkload | None
    traffic: ReplayTraffic | None
    time_scale: float
    metrics_path: str | None = METRICS_PATH  # None: the server's /metrics is not scraped
    metrics_interval_s: float = INTERVAL_S
    slo_attainment: float = ATTAINMENT
    workers: int = 1  # client processes (closed loop only)


def positive_ints(option: str, text: str) -> tuple[int, ...]:
    """`1,4,8` for `option`: positive integers; anything else is a one-line usage error."""
    values = []
    for part in (p.strip() for p in text.split(",")):
        try:
            value = int(part)
        except ValueError:
            fail(f"{option}: {part!r} is not an integer (expected e.g. 1,4,8)", EXIT_USAGE)
        if value < 1:
            fail(f"{option}: {value} is not a positive integer (expected e.g. 1,4,8)", EXIT_USAGE)
        values.append(value)
    return tuple(values)


def _positive_floats(option: str, text: str) -> tuple[float, ...]:
    values = []
    for part in (p.strip() for p in text.split(",")):
        try:
            value = float(part)
        except ValueError:
            fail(f"{option}: {part!r} is not a number (expected e.g. 2,4.5)", EXIT_USAGE)
        if not math.isfinite(value) or value <= 0:
            fail(f"{option}: {part} must be a positive, finite number", EXIT_USAGE)
        values.append(value)
    return tuple(values)


def _arrivals(
    concurrency: str | None,
    rate: str | None,
    arrival: str | None,
    burstiness: float | None,
    seed: int,
    traffic: ReplayTraffic | None,
    time_scale: float,
    ramp_text: str | None = None,
) -> tuple[Arrival, ...]:
    if concurrency is not None and rate is not None:
        fail("choose --concurrency (closed loop) or --rate (open loop), not both", EXIT_USAGE)
    if ramp_text is not None:
        if concurrency is not None or rate is not None or arrival is not None:
            fail(
                "--ramp is its own open loop: drop --concurrency, --rate and --arrival", EXIT_USAGE
            )
        first, sep, last = ramp_text.partition(":")
        if not sep:
            fail(f"--ramp: {ramp_text!r} is not FROM:TO requests/s (e.g. 1:8)", EXIT_USAGE)
        start, end = _positive_floats("--ramp", f"{first},{last}")
        return (ramp(start, end, seed=seed),)
    if arrival is not None and arrival not in ("poisson", "gamma"):
        fail(f"--arrival: unknown {arrival!r}; choose poisson or gamma", EXIT_USAGE)
    if arrival is not None and rate is None:
        fail("--arrival needs --rate (open loop)", EXIT_USAGE)
    if burstiness is not None and arrival != "gamma":
        fail("--burstiness needs --arrival gamma", EXIT_USAGE)
    if burstiness is not None and not (math.isfinite(burstiness) and burstiness > 0):
        fail(f"--burstiness: {burstiness} must be a positive, finite number", EXIT_USAGE)
    if rate is not None:
        gamma = arrival == "gamma"
        return tuple(
            open_loop(r, burstiness=(burstiness or 1.0) if gamma else None, seed=seed)
            for r in _positive_floats("--rate", rate)
        )
    if concurrency is None and traffic is not None and traffic.offsets_s is not None:
        return (Arrival(kind="replay", time_scale=time_scale),)
    return tuple(closed_loop(c) for c in positive_ints("--concurrency", concurrency or "1"))


def _check_number(option: str, value: float, *, minimum: float, inclusive: bool = True) -> None:
    ok = value >= minimum if inclusive else value > minimum
    if not (math.isfinite(value) and ok):
        relation = ">=" if inclusive else ">"
        fail(f"{option}: {value:g} must be {relation} {minimum:g}", EXIT_USAGE)


def make_plan(
    *,
    replay_file: Path | None,
    url: str,
    model: str | None,
    concurrency: str | None,
    rate: str | None,
    arrival: str | None,
    burstiness: float | None,
    requests: int,
    duration_s: float,
    warmup: int | None,
    workload_name: str,
    time_scale: float | None,
    input_tokens: int,
    output_tokens: int,
    seed: int,
    slo_text: str | None,
    deadline_s: float,
    logprobs: bool = False,
    metrics_path: str | None = METRICS_PATH,
    metrics_interval_s: float = INTERVAL_S,
    slo_attainment: float = ATTAINMENT,
    ramp_text: str | None = None,
    workers: int = 1,
) -> Plan:
    """Check every option (and read the replay file whole); exits 2 on the first problem."""
    if workload_name not in WORKLOADS:
        fail(f"--workload: unknown {workload_name!r}; choose {', '.join(WORKLOADS)}", EXIT_USAGE)
    if workload_name == "replay" and replay_file is None:
        fail("--workload replay needs a FILE: --workload replay traffic.jsonl", EXIT_USAGE)
    if workload_name != "replay" and replay_file is not None:
        fail(f"unexpected argument {replay_file} (only --workload replay takes a FILE)", EXIT_USAGE)
    if logprobs and workload_name != "synthetic":
        fail("--logprobs applies to --workload synthetic only", EXIT_USAGE)
    if time_scale is not None and workload_name != "replay":
        fail("--time-scale applies to --workload replay only", EXIT_USAGE)
    _check_number("--requests", requests, minimum=1)
    _check_number("--duration-s", duration_s, minimum=0, inclusive=False)
    _check_number("--deadline-s", deadline_s, minimum=0, inclusive=False)
    _check_number("--warmup", warmup if warmup is not None else 0, minimum=0)
    _check_number("--input-tokens", input_tokens, minimum=1)
    _check_number("--output-tokens", output_tokens, minimum=1)
    _check_number(
        "--time-scale", 1.0 if time_scale is None else time_scale, minimum=0, inclusive=False
    )
    _check_number("--metrics-interval-s", metrics_interval_s, minimum=0, inclusive=False)
    if not (math.isfinite(slo_attainment) and 0 < slo_attainment <= 1):
        fail(f"--slo-attainment: {slo_attainment:g} must be in (0, 1]", EXIT_USAGE)
    if metrics_path is not None and not metrics_path.startswith(("/", "../")):
        fail(
            f"--metrics-path: {metrics_path!r} must be a path on the endpoint's server "
            "(e.g. /metrics)",
            EXIT_USAGE,
        )
    if workers < 1:
        fail(f"--workers: {workers} must be >= 1 (client processes)", EXIT_USAGE)
    try:
        slo = parse_slo(slo_text) if slo_text is not None else None
    except SLOError as exc:
        fail(f"--slo: {exc}", EXIT_USAGE)
    try:
        traffic = read_replay(replay_file) if replay_file is not None else None
    except ReplayError as exc:
        fail(str(exc), EXIT_USAGE)
    if time_scale is not None and traffic is not None and traffic.offsets_s is None:
        fail(f"--time-scale: {traffic.path} has no timestamps to scale", EXIT_USAGE)
    arrivals = _arrivals(
        concurrency, rate, arrival, burstiness, seed, traffic, time_scale or 1.0, ramp_text
    )
    if workers > 1 and any(a.kind != "closed" for a in arrivals):
        fail(
            f"--workers {workers}: only closed-loop steps (--concurrency) are spread over "
            "processes; drop --workers for --rate, --ramp or a timed replay",
            EXIT_USAGE,
        )
    return Plan(
        url=normalise_url(url),
        model=model,
        arrivals=arrivals,
        bounds=BenchBounds(
            requests=requests, duration_s=duration_s, warmup=warmup, deadline_s=deadline_s
        ),
        slo=slo,
        workload=workload_name,
        synthetic=SyntheticWorkload(
            input_tokens=input_tokens, output_tokens=output_tokens, seed=seed, logprobs=logprobs
        )
        if workload_name == "synthetic"
        else None,
        traffic=traffic,
        time_scale=time_scale or 1.0,
        metrics_path=metrics_path,
        metrics_interval_s=metrics_interval_s,
        slo_attainment=slo_attainment,
        workers=workers,
    )
