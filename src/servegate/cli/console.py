"""Terminal plumbing shared by the commands: consoles, one-line errors, the progress display."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, NoReturn

import click
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from servegate.reports.plain import plain

if TYPE_CHECKING:
    from servegate.orchestration.runner import ProgressFn


stdout = Console(highlight=False, soft_wrap=False)
stderr = Console(stderr=True, highlight=False)
LOG_WIDTH = 160  # not a terminal (a pipe, a CI log): no reason to wrap a table at 80 columns


def for_tables(console: Console) -> Console:
    """`console` as it is on a terminal; at least LOG_WIDTH columns wide on a pipe or a log,
    where rich would otherwise cut a wide table's cells to fit 80."""
    if console.is_terminal:
        return console
    return Console(file=console.file, width=max(console.width, LOG_WIDTH), highlight=False)


def fail(message: str, exit_code: int) -> NoReturn:
    """One clear line on stderr and the exit code; never a traceback. The message can quote a
    server (its error text, a model id): control characters are shown as escapes."""
    click.echo(f"servegate: error: {plain(message, one_line=True)}", err=True)
    sys.exit(exit_code)


def eta(elapsed_s: float, done: int, total: int) -> str:
    """`  (ETA 1m 20s)` from the pace so far; empty before the first step is done."""
    if done <= 0 or total <= done:
        return ""
    left = round(elapsed_s / done * (total - done))
    return f"  (ETA {left // 60}m {left % 60:02d}s)" if left >= 60 else f"  (ETA {left}s)"


@contextmanager
def gate_progress(enabled: bool, label: str = "") -> Iterator[ProgressFn | None]:
    """A live bar per gate on stderr; yields the callback the runner calls."""
    if not enabled:
        yield None
        return
    if not stderr.is_terminal:
        # Logs (CI) get one plain line per step instead of a live bar, with the gate's ETA.
        started: dict[str, float] = {}

        def log(gate: str, done: int, total: int, probe: str) -> None:
            now = time.monotonic()
            started.setdefault(gate, now)
            if probe:
                click.echo(
                    f"{label}{gate} {done}/{total} {probe}{eta(now - started[gate], done, total)}",
                    err=True,
                )

        yield log
        return
    columns = (
        TextColumn("[bold]{task.fields[prefix]}{task.description:<8}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        TextColumn("{task.fields[probe]}"),
    )
    with Progress(*columns, console=stderr, transient=False) as bar:
        tasks: dict[str, TaskID] = {}

        def update(gate: str, done: int, total: int, probe: str) -> None:
            if gate not in tasks:
                tasks[gate] = bar.add_task(gate, total=total, prefix=label, probe="")
            bar.update(tasks[gate], completed=done, total=total, probe=probe[:40])

        yield update
