"""`servegate matrix FILE`: the execution-path matrix, a result column per gate."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import click
from rich.table import Table

from servegate.cli.console import fail, for_tables, gate_progress, stderr, stdout
from servegate.cli.gate_baseline import check_baseline_config
from servegate.cli.report_files import checked
from servegate.config.extras import MissingExtraError, require
from servegate.config.loader import ConfigError
from servegate.config.matrix import MATRIX_FIELDS, load_matrix
from servegate.endpoints.errors import EndpointError
from servegate.orchestration.matrix import MatrixRow, matrix_exit_code, run_matrix
from servegate.orchestration.ray_matrix import (
    PLACEMENT_TIMEOUT_S,
    collect_rows,
    new_matrix_id,
    run_matrix_on_ray,
)
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
                **({"node": r.node, "seconds": r.seconds} if r.node is not None else {}),
                **({"baseline": dict(r.baseline)} if r.baseline is not None else {}),
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


def _announce(row: MatrixRow) -> None:
    """A line per entry as its Ray task ends."""
    outcome = str(row.report.verdict) if row.report else plain(row.error or "", one_line=True)
    where = f" on {row.node} in {row.seconds:.0f} s" if row.node and row.seconds else ""
    stderr.print(f"entry {plain(row.entry.name, one_line=True)}{where}: {outcome}",
                 markup=False, highlight=False)  # fmt: skip


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
@click.option("--ray", "ray_address", default=None, metavar="ADDRESS|auto",
              help="Run each entry as a task of this Ray cluster (auto: the one this machine "
              "belongs to), placed by the resources it declares; needs servegate[ray] and, "
              "on more than one node, a shared --db (PostgreSQL).")  # fmt: skip
@click.option("--placement-timeout", type=click.FloatRange(min=0), default=PLACEMENT_TIMEOUT_S,
              show_default=True, metavar="SECONDS",
              help="With --ray: an entry no node of the cluster can place for this long is "
              "reported as not run.")  # fmt: skip
@click.option("--collect", "collect_id", default=None, metavar="ID",
              help="Show the table of the --ray matrix ID (printed when it starts) from --db "
              "alone, while its entries still run: finished entries with their verdicts, the "
              "others as running, interrupted or not started (exit 3 until all finished).",
              )  # fmt: skip
def matrix(
    matrix_file: Path,
    db: str,
    json_path: Path | None,
    quiet: bool,
    ray_address: str | None,
    placement_timeout: float,
    collect_id: str | None,
) -> None:
    """Run the gates for every entry of MATRIX_FILE (YAML: a shared baseline, run settings, and
    an entry per execution path: url or launch, model, engine_version, hardware, tp,
    execution, attention_backend, quantization, fusion, activation_dtype, norm_dtype) and print
    the matrix with a result column per gate. Each entry is a recorded run (`servegate runs`).

    With --ray ADDRESS|auto each entry is a task of a Ray cluster, given the resources it asks
    for (GPUs tp x pp, or its `resources:` block), and runs on the node Ray chose; the matrix's
    ID is printed first, and `servegate matrix FILE --collect ID` shows its table from the
    database while it runs (from any machine that reaches --db).

    Exit codes: 0 every entry passed, 1 an entry failed, 2 usage error or an entry that could
    not be run as configured, 3 an entry inconclusive."""
    outputs = checked({"json": json_path})
    if collect_id is not None and ray_address is not None:
        fail("--collect reads a matrix's runs from --db; it runs nothing: drop --ray", 2)
    try:
        if ray_address is not None:  # before anything is read or written
            require("ray", "servegate matrix --ray")
        # On Ray the entries run in other processes, maybe on other hosts: the file's relative
        # paths (suite, launch folders) are made absolute.
        spec = load_matrix(matrix_file.resolve() if ray_address is not None else matrix_file)
        store = open_engine(db)
        stored_url = None
        if spec.baseline_run is not None:
            stored = load_baseline(store, spec.baseline_run)
            stored_url = stored.endpoint_url
            for entry in spec.entries:
                check_baseline_config(stored, spec.config(entry, str(matrix_file), stored_url))
        if collect_id is not None:
            rows = collect_rows(spec, store, collect_id)
        elif ray_address is not None:
            matrix_id = new_matrix_id()

            def started() -> None:  # connected and accepted: a refusal stays one line
                stderr.print(f"matrix {matrix_id} on Ray: `servegate matrix {matrix_file} "
                             f"--collect {matrix_id}` shows its table while it runs",
                             markup=False, highlight=False)  # fmt: skip

            rows = run_matrix_on_ray(spec, source=str(matrix_file), store=store,
                                     address=ray_address, stored_url=stored_url,
                                     placement_timeout_s=placement_timeout,
                                     announce=None if quiet else _announce,
                                     matrix_id=matrix_id,
                                     started=None if quiet else started)  # fmt: skip
        else:
            with gate_progress(not quiet) as progress:
                local = run_matrix(spec, source=str(matrix_file), store=store,
                                   stored_url=stored_url, progress=progress)  # fmt: skip
                rows = asyncio.run(local)
    except (ConfigError, EndpointError, StoreError, PreflightError, MissingExtraError) as exc:
        fail(str(exc), exc.exit_code)
    if not quiet:
        for_tables(stdout).print(_table(rows))
    if "json" in outputs:
        write_atomic(outputs["json"], _rows_json(rows) + "\n")
    raise SystemExit(matrix_exit_code(rows))
