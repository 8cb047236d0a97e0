"""The report-file options `gate` and `report` share: checked before work, written atomically."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TypeVar

import click

from servegate.cli.console import fail
from servegate.reports.output import Latencies, OutputPathError, check_outputs, write_reports
from servegate.verdict.model import Report

F = TypeVar("F", bound=Callable[..., object])

LABELS = {"json": "JSON", "html": "HTML", "markdown": "Markdown", "junit": "JUnit"}


def file_options(*formats: str) -> Callable[[F], F]:
    """Add `--<format> FILE` for each format (parameters `<format>_path`)."""
    helps = {
        "json": "Write the versioned JSON report here (atomically).",
        "html": "Write the self-contained HTML report here (atomically).",
        "markdown": "Write the Markdown report (GitHub step summary, PR comment) here.",
        "junit": "Write JUnit XML here (a testcase per check and per probe).",
    }

    def add(command: F) -> F:
        for fmt in reversed(formats):
            option = click.option(
                f"--{fmt}",
                f"{fmt}_path",
                metavar="FILE",
                type=click.Path(path_type=Path),
                help=helps[fmt],
            )
            command = option(command)
        return command

    return add


def checked(paths: Mapping[str, Path | None]) -> dict[str, Path]:
    """The requested report files, checked; a bad path is a one-line error, exit 2."""
    try:
        return check_outputs(paths)
    except OutputPathError as exc:
        fail(str(exc), exc.exit_code)


def write(
    report: Report,
    outputs: Mapping[str, Path],
    latencies_ms: Latencies | None,
    *,
    quiet: bool = False,
) -> None:
    """Write each report file and, unless quiet, say where it went (on stderr)."""
    try:
        write_reports(report, outputs, latencies_ms=latencies_ms)
    except OutputPathError as exc:
        fail(str(exc), exc.exit_code)
    for fmt, path in {} if quiet else outputs.items():
        click.echo(f"{LABELS[fmt]} report: {path}", err=True)
