"""`servegate bench`: measure one endpoint under load and report the sweep, one step per setting."""

from __future__ import annotations

import asyncio
import functools
from pathlib import Path

import click

from servegate.cli.bench_plan import Plan, make_plan
from servegate.cli.bench_view import bench_progress, print_bench
from servegate.cli.console import fail, stderr, stdout
from servegate.endpoints.errors import EndpointError
from servegate.endpoints.http import OpenAIEndpoint
from servegate.endpoints.retry import RetryConfig
from servegate.endpoints.transport import TimeoutConfig
from servegate.endpoints.urls import display_url
from servegate.load.bench import BenchProgress, bench
from servegate.load.driver import run_step
from servegate.load.result import BenchResult
from servegate.load.server_metrics import METRICS_PATH, SCRAPE_DEADLINE_S, endpoint_scrape
from servegate.load.sweep import ATTAINMENT
from servegate.load.workers import WorkerError, WorkerPool, WorkerSetup
from servegate.load.workload import (
    Workload,
    WorkSource,
    golden_source,
    golden_workload,
    replay_source,
    replay_workload,
    synthetic_source,
)
from servegate.orchestration.runner import PreflightError, preflight
from servegate.probes import default_suite
from servegate.reports.json_report import write_atomic

EXIT_UNREACHABLE = 3


def _workload(
    model: str | None, plan: Plan
) -> tuple[Workload, WorkSource, tuple[float, ...] | None]:
    if plan.workload == "golden":
        suite = default_suite()
        return golden_workload(suite), golden_source(suite, model), None
    if plan.workload == "replay":
        assert plan.traffic is not None
        keep = plan.model is None  # each line keeps its own model unless --model says otherwise
        return (
            replay_workload(plan.traffic, plan.time_scale),
            replay_source(plan.traffic, model, keep_model=keep),
            plan.traffic.offsets_s,
        )
    assert plan.synthetic is not None
    return plan.synthetic, synthetic_source(plan.synthetic, model), None


def _load_endpoint(
    url: str, api_key_env: str | None, deadline_s: float, pool: int
) -> OpenAIEndpoint:
    return OpenAIEndpoint(
        "endpoint",
        url,
        api_key_env=api_key_env,
        timeouts=TimeoutConfig(deadline_s=deadline_s),
        retry=RetryConfig(max_attempts=1),  # under load a retry would hide the failure it retried
        max_connections=pool,
    )


def _worker_source(model: str | None, plan: Plan) -> WorkSource:
    """A --workers process's work source: the same items as this process's."""
    return _workload(model, plan)[1]


async def _run(plan: Plan, api_key_env: str | None, progress: BenchProgress | None) -> BenchResult:
    closed = [a.concurrency for a in plan.arrivals if a.concurrency is not None]
    pool = max(closed) if closed else plan.bounds.max_in_flight
    endpoint = _load_endpoint(plan.url, api_key_env, plan.bounds.deadline_s, pool)
    # Its own connection: a scrape never waits for, or holds, a connection of the load.
    scraper = OpenAIEndpoint(
        "metrics",
        plan.url,
        api_key_env=api_key_env,
        timeouts=TimeoutConfig(deadline_s=SCRAPE_DEADLINE_S),
        retry=RetryConfig(max_attempts=1),
        max_connections=1,
    )
    server = None if plan.metrics_path is None else endpoint_scrape(scraper, plan.metrics_path)
    workers: WorkerPool | None = None
    try:
        found = await preflight(endpoint, min(plan.bounds.deadline_s, 15.0))
        model = plan.model or (found.models[0] if found.models else None)
        workload, source, offsets = _workload(model, plan)
        if plan.workers > 1:
            each = functools.partial(
                _load_endpoint, plan.url, api_key_env, plan.bounds.deadline_s, pool
            )
            setup = WorkerSetup(each, functools.partial(_worker_source, model, plan))
            workers = WorkerPool(setup, plan.workers)
            await workers.ready()
        return await bench(
            endpoint,
            model=model,
            workload=workload,
            source=source,
            arrivals=plan.arrivals,
            bounds=plan.bounds,
            slo=plan.slo,
            replay_offsets_s=offsets,
            progress=progress,
            server=server,
            server_interval_s=plan.metrics_interval_s,
            slo_attainment=plan.slo_attainment,
            step_runner=workers.run_step if workers is not None else run_step,
            workers=plan.workers,
        )
    finally:
        if workers is not None:
            await workers.aclose()
        await endpoint.aclose()
        await scraper.aclose()


def _relative(path: str) -> str:
    """`/metrics` is next to the API's `/v1`: relative to the base URL's parent."""
    return ".." + path if path.startswith("/") else path


@click.command("bench")
@click.argument("replay_file", required=False, metavar="[FILE]", type=click.Path(path_type=Path))
@click.option(
    "--endpoint",
    "url",
    required=True,
    metavar="URL",
    help="Base URL, e.g. http://127.0.0.1:8000/v1.",
)
@click.option("--model", default=None, help="Model to send (default: the first the server lists).")
@click.option(
    "--concurrency",
    default=None,
    metavar="N[,N…]",
    help="Closed loop: one step per concurrency (default 1).",
)
@click.option(
    "--rate",
    default=None,
    metavar="R[,R…]",
    help="Open loop: one step per request rate (requests/s).",
)
@click.option(
    "--ramp",
    "ramp_text",
    default=None,
    metavar="FROM:TO",
    help="Open loop whose rate moves linearly from FROM to TO requests/s over the step.",
)
@click.option(
    "--arrival", default=None, metavar="poisson|gamma", help="Open-loop gaps (default poisson)."
)
@click.option(
    "--burstiness", default=None, type=float, help="Gamma shape: 1 = Poisson, < 1 burstier."
)
@click.option(
    "--requests",
    default=100,
    show_default=True,
    type=int,
    help="Measured requests per step (at most).",
)
@click.option(
    "--duration-s",
    default=60.0,
    show_default=True,
    type=float,
    help="Seconds of sending per step (at most).",
)
@click.option(
    "--warmup",
    default=None,
    type=int,
    help="Unmeasured requests before each step [default: one per stream; 1 in open loop].",
)
@click.option(
    "--workload",
    "workload_name",
    default="synthetic",
    show_default=True,
    metavar="synthetic|golden|replay",
    help="What to send; `replay` takes a JSONL FILE.",
)
@click.option(
    "--time-scale",
    default=None,
    type=float,
    help="Replay: multiply the file's timestamp gaps (0.5 = twice as fast).",
)
@click.option(
    "--input-tokens",
    default=256,
    show_default=True,
    type=int,
    help="Synthetic: prompt tokens (before the chat template).",
)
@click.option(
    "--output-tokens",
    default=128,
    show_default=True,
    type=int,
    help="Synthetic: max_tokens of each request.",
)
@click.option(
    "--seed",
    default=0,
    show_default=True,
    type=int,
    help="Seed of synthetic prompts and open-loop gaps.",
)
@click.option(
    "--slo",
    "slo_text",
    default=None,
    metavar="KEY=MS,…",
    help="Goodput SLOs: ttft_ms=…,tpot_ms=…,e2el_ms=….",
)
@click.option(
    "--slo-attainment",
    default=ATTAINMENT,
    show_default=True,
    type=float,
    help="Share of a step's requests that must meet every SLO for the step to meet the SLOs.",
)
@click.option(
    "--metrics-path",
    default=METRICS_PATH.removeprefix(".."),
    show_default=True,
    metavar="PATH",
    help="The server's Prometheus metrics, scraped during each step (evidence, not judged).",
)
@click.option(
    "--no-server-metrics", is_flag=True, help="Do not scrape the server's Prometheus metrics."
)
@click.option(
    "--metrics-interval-s",
    default=1.0,
    show_default=True,
    type=float,
    help="Seconds between scrapes of the server's metrics.",
)
@click.option(
    "--deadline-s", default=60.0, show_default=True, type=float, help="Deadline of each request."
)
@click.option(
    "--logprobs",
    is_flag=True,
    help="Synthetic: ask for logprobs, so each chunk's token count is known (per-token ITL).",
)
@click.option(
    "--json",
    "json_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write the versioned JSON result here (atomically).",
)
@click.option(
    "--api-key-env", default=None, metavar="VAR", help="Environment variable holding the API key."
)
@click.option(
    "--workers",
    default=1,
    show_default=True,
    type=int,
    help="Client processes the streams of each closed-loop step are spread over (one core each).",
)
@click.option(
    "--api",
    type=click.Choice(["generate", "embeddings"]),
    default="generate",
    show_default=True,
    help="generate: chat/completions as the workload says; embeddings: POST /embeddings with "
    "synthetic inputs of --input-tokens (latency and throughput, no streaming).",
)
@click.option(
    "--inputs-per-request",
    default=1,
    show_default=True,
    type=click.IntRange(1),
    help="--api embeddings: inputs in each request's `input` list.",
)
@click.option("--quiet", "-q", is_flag=True, help="No progress and no table.")
def bench_command(
    replay_file: Path | None,
    url: str,
    model: str | None,
    concurrency: str | None,
    rate: str | None,
    ramp_text: str | None,
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
    slo_attainment: float,
    metrics_path: str,
    no_server_metrics: bool,
    metrics_interval_s: float,
    deadline_s: float,
    logprobs: bool,
    json_path: Path | None,
    api_key_env: str | None,
    workers: int,
    api: str,
    inputs_per_request: int,
    quiet: bool,
) -> None:
    """Measure one OpenAI-compatible endpoint under load: TTFT, TPOT, ITL, E2EL, throughput,
    goodput and errors per step, every answer checked, the client's own limits measured.

    `--workload replay FILE` replays a JSONL file (one request body per line, optional
    `timestamp`). `--api embeddings` measures POST /embeddings instead (synthetic inputs; no
    SLOs, logprobs, server metrics or --workers). Exit codes: 0 measured, 1 a --workers process
    failed (the steps run so far are written, its requests missing and named), 2 usage error,
    3 endpoint unreachable or no request succeeded.
    """
    plan = make_plan(
        replay_file=replay_file,
        url=url,
        model=model,
        concurrency=concurrency,
        rate=rate,
        arrival=arrival,
        burstiness=burstiness,
        requests=requests,
        duration_s=duration_s,
        warmup=warmup,
        workload_name=workload_name,
        time_scale=time_scale,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        seed=seed,
        slo_text=slo_text,
        deadline_s=deadline_s,
        logprobs=logprobs,
        metrics_path=None if no_server_metrics else _relative(metrics_path),
        metrics_interval_s=metrics_interval_s,
        slo_attainment=slo_attainment,
        ramp_text=ramp_text,
        workers=workers,
    )
    if api == "embeddings":
        _embeddings(plan, inputs_per_request, api_key_env, json_path, quiet,
                    slo=slo_text, logprobs=logprobs)  # fmt: skip
        return
    try:
        with bench_progress(stderr, not quiet) as progress:
            result = asyncio.run(_run(plan, api_key_env, progress))
    except (EndpointError, PreflightError, WorkerError) as exc:
        fail(str(exc), exc.exit_code)
    if json_path is not None:
        write_atomic(json_path, result.model_dump_json(indent=2) + "\n")
    if not quiet:
        print_bench(result, stdout)
        if json_path is not None:
            stderr.print(f"JSON result: {json_path}")
    failed = [f for step in result.steps for f in step.worker_failures]
    if failed:
        fail(f"{failed[0]} (step {result.steps[-1].label}; the sweep stopped there)", 1)
    if result.succeeded == 0:
        sent = sum(step.metrics.sent for step in result.steps)
        fail(f"no request to {display_url(plan.url)} succeeded ({sent} sent)", EXIT_UNREACHABLE)


def _embeddings(
    plan: Plan,
    inputs_per_request: int,
    api_key_env: str | None,
    json_path: Path | None,
    quiet: bool,
    *,
    slo: str | None,
    logprobs: bool,
) -> None:
    from servegate.cli.bench_embeddings import print_embeddings_bench, run_embeddings

    given = [flag for flag, on in (("--slo", slo), ("--logprobs", logprobs)) if on]
    if plan.workers > 1:
        given.append(f"--workers {plan.workers}")
    if plan.workload != "synthetic":
        given.append(f"--workload {plan.workload}")
    if given:
        fail(f"--api embeddings sends synthetic inputs; {', '.join(given)} does not apply", 2)
    try:
        with bench_progress(stderr, not quiet) as progress:
            result = asyncio.run(run_embeddings(plan, inputs_per_request, api_key_env, progress))
    except (EndpointError, PreflightError) as exc:
        fail(str(exc), exc.exit_code)
    if json_path is not None:
        write_atomic(json_path, result.model_dump_json(indent=2) + "\n")
    if not quiet:
        print_embeddings_bench(result, stdout)
        if json_path is not None:
            stderr.print(f"JSON result: {json_path}")
    if result.succeeded == 0:
        sent = sum(step.metrics.sent for step in result.steps)
        fail(f"no request to {display_url(plan.url)} succeeded ({sent} sent)", EXIT_UNREACHABLE)
