"""`servegate diff RUN_A RUN_B`: what changed between two stored runs."""

from __future__ import annotations

import json

import click
from rich.table import Table
from rich.text import Text

from servegate.cli.console import fail, stdout
from servegate.endpoints.text import clip
from servegate.reports.diff import diff_reports
from servegate.reports.plain import plain
from servegate.store.reader import stored_report
from servegate.store.writer import DEFAULT_DB, StoreError, open_engine

CELL_CHARS = 160


def _cell(value: str) -> Text:
    # Server text (messages, values) is never markup and never a terminal escape.
    return Text(clip(plain(value, one_line=True), CELL_CHARS))


@click.command("diff")
@click.argument("run_a", metavar="RUN_A")
@click.argument("run_b", metavar="RUN_B")
@click.option(
    "--db", default=str(DEFAULT_DB), show_default=True, metavar="PATH|URL", help="The run database."
)
@click.option("--json", "as_json", is_flag=True, help="Print the changes as JSON.")
def diff(run_a: str, run_b: str, db: str, as_json: bool) -> None:
    """Compare two stored runs: verdict, each gate's status, the checks and Correctness rows
    whose outcome or values changed, and the findings added or removed.

    Exit 0 when nothing changed, 1 when something did, 2 when a run is unknown or has no
    report."""
    try:
        engine = open_engine(db, create=False)
        a, b = stored_report(engine, run_a), stored_report(engine, run_b)
    except StoreError as exc:
        fail(str(exc), exc.exit_code)
    result = diff_reports(a, b)
    if as_json:
        click.echo(json.dumps(result.as_json(), indent=2, ensure_ascii=True))
    elif result.same:
        stdout.print(Text(f"runs {a.run_id} and {b.run_id}: no change"))
    else:
        title = Text(f"{a.run_id} → {b.run_id}: {len(result.changes)} change(s)")
        table = Table(title=title, title_justify="left")
        for col in ("what", "gate", "item", "field", a.run_id, b.run_id):
            table.add_column(col, overflow="fold")
        for c in result.changes:
            table.add_row(c.kind, _cell(c.gate), _cell(c.item), c.field, _cell(c.a), _cell(c.b))
        stdout.print(table)
    raise SystemExit(0 if result.same else 1)
