"""`servegate bench --api embeddings`: run the embeddings sweep and show its table."""

from __future__ import annotations

from rich.console import Console, JustifyMethod
from rich.table import Table
from rich.text import Text

from servegate.cli.bench_plan import Plan
from servegate.cli.console import for_tables
from servegate.endpoints.http import OpenAIEndpoint
from servegate.endpoints.retry import RetryConfig
from servegate.endpoints.transport import TimeoutConfig
from servegate.load.bench import BenchProgress
from servegate.load.embeddings import (
    DEFINITIONS,
    EmbeddingsBenchResult,
    EmbeddingsStepResult,
    EmbeddingsWorkload,
    bench_embeddings,
)
from servegate.orchestration.runner import preflight


async def run_embeddings(
    plan: Plan, inputs_per_request: int, api_key_env: str | None, progress: BenchProgress | None
) -> EmbeddingsBenchResult:
    """The embeddings sweep of `plan` (synthetic inputs of plan's input_tokens and seed)."""
    assert plan.synthetic is not None
    closed = [a.concurrency for a in plan.arrivals if a.concurrency is not None]
    endpoint = OpenAIEndpoint(
        "endpoint",
        plan.url,
        api_key_env=api_key_env,
        timeouts=TimeoutConfig(deadline_s=plan.bounds.deadline_s),
        retry=RetryConfig(max_attempts=1),  # under load a retry would hide the failure it retried
        max_connections=max(closed) if closed else plan.bounds.max_in_flight,
    )
    try:
        found = await preflight(endpoint, min(plan.bounds.deadline_s, 15.0))
        model = plan.model or (found.models[0] if found.models else None)
        workload = EmbeddingsWorkload(
            input_tokens=plan.synthetic.input_tokens,
            inputs_per_request=inputs_per_request,
            seed=plan.synthetic.seed,
        )
        return await bench_embeddings(
            endpoint,
            model=model,
            workload=workload,
            arrivals=plan.arrivals,
            bounds=plan.bounds,
            progress=progress,
        )
    finally:
        await endpoint.aclose()


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}" if value < 100 else f"{value:,.0f}"


COLUMNS: tuple[tuple[str, JustifyMethod], ...] = (
    ("step", "left"),
    ("req/s", "right"),
    ("inputs/s", "right"),
    ("prompt tok/s", "right"),
    ("latency ms p50 / p95 / p99", "right"),
    ("errors", "right"),
    ("dimension", "right"),
    ("client-bound", "left"),
)
LEGEND = {
    "req/s": DEFINITIONS["requests_per_s"],
    "inputs/s": DEFINITIONS["inputs_per_s"],
    "prompt tok/s": DEFINITIONS["prompt_tokens_per_s"],
    "latency": DEFINITIONS["latency_ms"],
    "errors": "failed requests / requests sent (the client checks each answer: one vector per "
    "input, finite, non-zero norm)",
    "dimension": DEFINITIONS["dimensions"],
}


def _row(step: EmbeddingsStepResult) -> list[str | Text]:
    m = step.metrics
    latency = m.latency_ms
    dims = ", ".join(sorted(m.dimensions)) or "-"
    return [
        step.label,
        _rate(m.requests_per_s.value),
        _rate(m.inputs_per_s.value),
        _rate(m.prompt_tokens_per_s.value),
        f"{_ms(latency.p50)} / {_ms(latency.p95)} / {_ms(latency.p99)}",
        Text(f"{m.failed}/{m.sent}", "red" if m.failed else ""),
        Text(dims, "red" if len(m.dimensions) > 1 else ""),
        Text("BOUND", "bold red") if step.client.client_bound else Text("no", "green"),
    ]


def print_embeddings_bench(result: EmbeddingsBenchResult, console: Console) -> None:
    """The table (one row per step), the errors, then the definition of every number shown."""
    w = result.workload
    table = Table(
        title=f"{result.endpoint}  model {result.model or '-'}  embeddings: "
        f"{w.inputs_per_request} input(s) of ~{w.input_tokens} tokens per request",
        title_justify="left",
    )
    for name, justify in COLUMNS:
        table.add_column(name, justify=justify)
    for step in result.steps:
        table.add_row(*_row(step))
    console = for_tables(console)
    console.print(table)
    for step in result.steps:
        m = step.metrics
        if step.client.client_bound:
            console.print(f"{step.label}: client-bound: " + "; ".join(step.client.reasons))
        if m.errors:
            errors = ", ".join(f"{n} {c}" for c, n in sorted(m.errors.items()))
            console.print(f"{step.label}: errors: {errors}", overflow="fold")
    console.print("definitions (times in ms):", style="dim")
    for short, text in LEGEND.items():
        console.print(f"  {short} = {text}", style="dim", overflow="fold")
