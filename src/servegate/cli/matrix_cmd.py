"""`servegate matrix FILE`: the execution-path matrix, a result column per gate."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import click
from rich.table import Table

from servegate.cli.console import fail, for_tables, gate_progress, stdout
from servegate.cli.gate_baseline import check_baseline_config
from servegate.cli.report_files import checked
from servegate.config.loader import ConfigError
from servegate.config.matrix import MATRIX_FIELDS, load_matrix
from servegate.endpoints.errors import EndpointError
from servegate.orchestration.matrix import MatrixRow, matrix_exit_code, run_matrix
from servegate.orchestration.runner import GATE_ORDER, PreflightError
from servegate.reports.json_report import write_atomic
from servegate.reports.plain import plain
from servegate.store.baselines import load_baseline
from servegate.store.writer import DEFAULT_DB, StoreError, open_engine


def _rows_json(rows: list[MatrixRow]) -> str:
    return json.dumps(
        [
            {
                "entry": r.entry.name,
                "matrix": r.entry.declared(),
                "run_id": r.report.run_id if r.report else None,
                "verdict": str(r.report.verdict) if r.report else None,
                "exit_code": r.exit_code,
                "error": r.error,
                "gates": {g.name: str(g.status) for g in r.report.gates} if r.report else {},
            }
            for r in rows
        ],
        indent=2,
    )


def _table(rows: list[MatrixRow]) -> Table:
    fields = [f for f in MATRIX_FIELDS if any(f in r.entry.declared() for r in rows)]
    gates = [g for g in GATE_ORDER if any(r.status(g) is not None for r in rows)]
    table = Table(title="Execution-path matrix", title_justify="left")
    for column in ["entry", *fields, *gates, "verdict"]:
        table.add_column(column)
    for r in rows:
        declared = r.entry.declared()
        cells = [plain(r.entry.name, one_line=True)]
        cells += [plain(declared.get(f, "-"), one_line=True) for f in fields]
        cells += [str(r.status(g) or "-") for g in gates]
        cells.append(str(r.report.verdict) if r.report else f"error: {plain(r.error)}")
        table.add_row(*cells)
    return table


@click.command("matrix")
@click.argument("matrix_file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--db",
    default=str(DEFAULT_DB),
    show_default=True,
    metavar="PATH|URL",
    help="Where the runs are recorded (SQLite path or SQLAlchemy URL).",
)
@click.option("--json", "json_path", type=click.Path(path_type=Path), default=None,
              help="Write the matrix (a row per entry) as JSON.")  # fmt: skip
@click.option("--quiet", "-q", is_flag=True, help="No progress display and no table.")
def matrix(matrix_file: Path, db: str, json_path: Path | None, quiet: bool) -> None:
    """Run the gates for every entry of MATRIX_FILE (YAML: a shared baseline, run settings, and
    an entry per execution path: url or launch, model, engine_version, hardware, tp,
    execution, attention_backend, quantization, fusion, activation_dtype, norm_dtype) and print
    the matrix with a result column per gate. Each entry is a recorded run (`servegate runs`).

    Exit codes: 0 every entry passed, 1 an entry failed, 2 usage error or an entry that could
    not be run as configured, 3 an entry inconclusive."""
    outputs = checked({"json": json_path})
    try:
        spec = load_matrix(matrix_file)
        store = open_engine(db)
        stored_url = None
        if spec.baseline_run is not None:
            stored = load_baseline(store, spec.baseline_run)
            stored_url = stored.endpoint_url
            for entry in spec.entries:
                check_baseline_config(stored, spec.config(entry, str(matrix_file), stored_url))
        with gate_progress(not quiet) as progress:
            rows = asyncio.run(run_matrix(spec, source=str(matrix_file), store=store,
                                          stored_url=stored_url, progress=progress))  # fmt: skip
    except (ConfigError, EndpointError, StoreError, PreflightError) as exc:
        fail(str(exc), exc.exit_code)
    if not quiet:
        for_tables(stdout).print(_table(rows))
    if "json" in outputs:
        write_atomic(outputs["json"], _rows_json(rows) + "\n")
    raise SystemExit(matrix_exit_code(rows))
