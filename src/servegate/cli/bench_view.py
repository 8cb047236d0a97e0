"""How `servegate bench` looks in a terminal: the sweep's progress and its table of steps."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import click
from rich.console import Console, JustifyMethod
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table
from rich.text import Text

from servegate.cli.console import for_tables
from servegate.load.bench import BenchProgress
from servegate.load.metrics import DEFINITIONS as METRICS
from servegate.load.monitor import CPU_SHARE_LIMIT, LOOP_LAG_P99_LIMIT_MS
from servegate.load.result import BenchResult, StepResult
from servegate.load.server_metrics import GAUGES

PLAIN_EVERY = 0.1  # plain progress: one line per 10 % of a step, and its end


@contextmanager
def bench_progress(console: Console, enabled: bool) -> Iterator[BenchProgress | None]:
    """A live bar per step on a terminal; plain lines otherwise (CI logs); nothing if disabled."""
    if not enabled:
        yield None
        return
    if not console.is_terminal:
        shown: dict[str, int] = {}

        def log(label: str, done: int, planned: int) -> None:
            step = max(int(planned * PLAIN_EVERY), 1)
            if done == planned or done // step > shown.get(label, 0) // step:
                click.echo(f"bench {label}: {done}/{planned} requests", err=True)
            shown[label] = done

        yield log
        return
    columns = (
        TextColumn("[bold]{task.description:<14}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console, transient=False) as bar:
        tasks: dict[str, TaskID] = {}

        def update(label: str, done: int, planned: int) -> None:
            if label not in tasks:
                tasks[label] = bar.add_task(label, total=planned)
            bar.update(tasks[label], completed=done, total=planned)

        yield update


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _pair(p50: float | None, p95: float | None) -> str:
    return f"{_ms(p50)} / {_ms(p95)}"


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}" if value < 100 else f"{value:,.0f}"


def _checks(step: StepResult) -> Text:
    c = step.correctness
    found = [
        (c.degenerate, "degenerate"),
        (c.empty, "empty"),
        (c.error_body, "error body"),
        (c.json_invalid, "bad JSON"),
        (c.tool_calls_invalid, "bad tool args"),
    ]
    parts = [f"{n} {what}" for n, what in found if n]
    return Text(", ".join(parts), "red") if parts else Text("ok", "green")


def _row(step: StepResult) -> list[str | Text]:
    m = step.metrics
    errors = Text(f"{m.failed}/{m.sent}", "red" if m.failed else "")
    bound = Text("BOUND", "bold red") if step.client.client_bound else Text("no", "green")
    return [
        step.label,
        _rate(m.requests_per_s.value),
        _rate(m.output_tokens_per_s.value),
        _pair(m.ttft_ms.p50, m.ttft_ms.p95),
        _pair(m.tpot_ms.p50, m.tpot_ms.p95),
        _pair(m.e2el_ms.p50, m.e2el_ms.p95),
        errors,
        _rate(m.goodput_rps.value),
        _checks(step),
        bound,
    ]


COLUMNS: tuple[tuple[str, JustifyMethod], ...] = (
    ("step", "left"),
    ("req/s", "right"),
    ("out tok/s", "right"),
    ("TTFT ms p50 / p95", "right"),
    ("TPOT ms p50 / p95", "right"),
    ("E2EL ms p50 / p95", "right"),
    ("errors", "right"),
    ("goodput/s", "right"),
    ("checks", "left"),
    ("client-bound", "left"),
)


def _notes(step: StepResult) -> list[str]:
    """What a row cannot show: client-bound reasons, errors, lengths, a failing answer."""
    m, lengths, notes = step.metrics, step.lengths, []
    for failure in step.worker_failures:
        notes.append(f"INCOMPLETE: {failure}")
    if step.client.client_bound:
        notes.append("client-bound: " + "; ".join(step.client.reasons))
    if m.errors:
        notes.append("errors: " + ", ".join(f"{n} {c}" for c, n in sorted(m.errors.items())))
    if m.output_tokens_estimated:
        notes.append("some output token counts are estimated (the server sent no usage)")
    asked, served = lengths.input_tokens_asked, m.prompt_tokens.mean
    if asked and served is not None and lengths.prompt_deviation_tokens is not None:
        notes.append(
            f"prompts of {asked} tokens asked; the server counted {served:.1f} on average "
            f"({lengths.prompt_deviation_tokens:+.1f}, chat template included)"
        )
    if lengths.output_short or lengths.output_over:
        notes.append(
            f"of {lengths.output_counted} answers {lengths.output_short} stopped before "
            f"max_tokens and {lengths.output_over} ran past it"
        )
    for example in step.correctness.examples[:1]:
        text = example.excerpt if len(example.excerpt) <= 60 else example.excerpt[:60] + "…"
        notes.append(f"e.g. {example.request}: {example.problem}: {text!r}")
    return notes


LEGEND = {
    "TTFT": METRICS["ttft_ms"],
    "TPOT": METRICS["tpot_ms"],
    "E2EL": METRICS["e2el_ms"],
    "req/s": METRICS["requests_per_s"],
    "out tok/s": METRICS["output_tokens_per_s"],
    "goodput/s": METRICS["goodput_rps"],
    "errors": METRICS["error_rate"],
    "checks": "answers failing a correctness check (degenerate, empty, error body, bad JSON, "
    "bad tool arguments)",
    "client-bound": "the load generator measured itself as the bottleneck: "
    f"CPU >= {CPU_SHARE_LIMIT:.0%} of one core, or event-loop or send lag p99 >= "
    f"{LOOP_LAG_P99_LIMIT_MS:g} ms",
}


def _server_lines(result: BenchResult) -> list[str]:
    """The server's own gauges per step, or one line saying why they were not measured."""
    servers = [(step.label, step.server) for step in result.steps if step.server is not None]
    if not servers:
        return []
    if not any(m.measured for _, m in servers):
        reasons = sorted({m.reason for _, m in servers})
        return [f"server metrics: not measured ({'; '.join(reasons)})"]
    return [f"{label}: server {m.describe()}" for label, m in servers]


def print_bench(result: BenchResult, console: Console) -> None:
    """The table (one row per step), then what a row cannot show, then the definition of every
    number shown."""
    slo = f"  SLO {result.slo.describe()}" if result.slo is not None else ""
    table = Table(
        title=f"{result.endpoint}  model {result.model or '-'}  workload {result.workload.kind}"
        f"{slo}{f'  {result.workers} client processes' if result.workers > 1 else ''}",
        title_justify="left",
    )
    for name, justify in COLUMNS:
        table.add_column(name, justify=justify)
    for step in result.steps:
        table.add_row(*_row(step))
    console = for_tables(console)
    console.print(table)
    for step in result.steps:
        for note in _notes(step):
            console.print(f"{step.label}: {note}", overflow="fold")
    server = _server_lines(result)
    for line in server:
        console.print(line, overflow="fold")
    limit = result.max_under_slo
    if limit is not None:
        console.print(limit.describe(), style="bold", overflow="fold")
    console.print("definitions (times in ms):", style="dim")
    legend = dict(LEGEND)
    if limit is not None:
        legend["max … under SLO"] = limit.definition
    if any(step.server is not None and step.server.measured for step in result.steps):
        legend.update(
            {f"server {g.key}": g.definition + " (scraped from the server's /metrics; "
             "evidence, not judged)" for g in GAUGES}
        )  # fmt: skip
    for short, text in legend.items():
        console.print(f"  {short} = {text}", style="dim", overflow="fold")
