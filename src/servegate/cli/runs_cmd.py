"""`servegate runs`: list recorded runs."""

from __future__ import annotations

import json

import click
from rich.table import Table
from rich.text import Text

from servegate.cli.console import fail, stdout
from servegate.reports.plain import plain
from servegate.store.errors import where
from servegate.store.process import shown_state
from servegate.store.writer import DEFAULT_DB, StoreError, list_runs, open_engine


@click.command("runs")
@click.option(
    "--db", default=str(DEFAULT_DB), show_default=True, metavar="PATH|URL", help="The run database."
)
@click.option("--limit", default=20, show_default=True, type=click.IntRange(min=1))
@click.option("--json", "as_json", is_flag=True, help="Print JSON for machines.")
def runs(db: str, limit: int, as_json: bool) -> None:
    """List recorded gate runs, newest first.

    State: running, finished, crashed (it raised; the reason says what), or interrupted (still
    marked running, but its process on this host is gone, or — from any host — its heartbeat is
    older than the 120 s lease: killed; `gate --resume RUN` continues it)."""
    try:
        engine = open_engine(db, create=False)
        rows = [{**r, "state": shown_state(r)} for r in list_runs(engine, limit)]
    except StoreError as exc:
        fail(str(exc), exc.exit_code)
    if as_json:
        keys = (
            "id",
            "name",
            "started_at",
            "finished_at",
            "state",
            "verdict",
            "exit_code",
            "baseline_url",
            "candidate_url",
            "model",
            "requests",
            "reason",
            "pid",
            "hostname",
            "heartbeat_at",
        )
        click.echo(json.dumps([{k: r[k] for k in keys} for r in rows], indent=2))
        return
    table = Table(title=Text(plain(f"runs in {where(engine.url)}")), title_justify="left")
    for col in ("run", "started", "verdict", "requests", "baseline", "candidate", "reason"):
        table.add_column(col, overflow="fold")
    for r in rows:
        cells = (r["id"], r["started_at"][:19], r["verdict"] or r["state"], r["requests"],
                 r["baseline_url"], r["candidate_url"], r["reason"])  # fmt: skip
        # A reason can quote a server's error text: shown, never read as markup or escapes.
        table.add_row(*(Text(plain(c, one_line=True)) for c in cells))
    stdout.print(table)
