"""`servegate report RUN`: render a stored run's report again, in any format."""

from __future__ import annotations

from pathlib import Path

import click

from servegate.cli.console import fail, for_tables, stdout
from servegate.cli.report_files import checked, file_options, write
from servegate.reports.terminal import print_report
from servegate.store.reader import request_latencies, stored_report
from servegate.store.writer import DEFAULT_DB, StoreError, open_engine


@click.command("report")
@click.argument("run_ref", metavar="RUN")
@click.option(
    "--db", default=str(DEFAULT_DB), show_default=True, metavar="PATH|URL", help="The run database."
)
@file_options("html", "markdown", "junit", "json")
@click.option("--show-info", is_flag=True, help="Also list informational findings (terminal).")
def report(
    run_ref: str,
    db: str,
    html_path: Path | None,
    markdown_path: Path | None,
    junit_path: Path | None,
    json_path: Path | None,
    show_info: bool,
) -> None:
    """Render the report of run RUN (its id, or a unique prefix of at least 4 characters).

    Without a file option the report is printed. The HTML report adds the per-request latencies
    recorded in the database. Exit 0 when rendered, 2 when the run is unknown, has no report
    (crashed, interrupted, still running) or a path is refused."""
    outputs = checked(
        {"html": html_path, "markdown": markdown_path, "junit": junit_path, "json": json_path}
    )
    try:
        engine = open_engine(db, create=False)
        found = stored_report(engine, run_ref)
        latencies = request_latencies(engine, found.run_id) if "html" in outputs else None
    except StoreError as exc:
        fail(str(exc), exc.exit_code)
    if not outputs:
        print_report(found, for_tables(stdout), show_info=show_info)
        return
    write(found, outputs, latencies)
