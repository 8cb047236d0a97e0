"""`servegate demo`: watch servegate pass a benign change and catch a real engine bug.

Starts three real llama.cpp engines on loopback: a clean baseline, a candidate with a benign
config change, and a candidate with the mixed-dtype fusion bug (attn_norm weights read as bf16,
the class of vLLM 0.25.0's `!!!!` bug), gates each candidate against the baseline and exits 0 only
when the benign one passed and the buggy one failed.
"""

from __future__ import annotations

import asyncio
import time
from contextlib import ExitStack
from pathlib import Path

import click
from rich.table import Table
from rich.text import Text

from servegate.cli.console import fail, for_tables, gate_progress, stderr, stdout
from servegate.config.models import EndpointConfig, GateConfig
from servegate.orchestration.runner import GATE_ORDER, PreflightError, run
from servegate.reports.json_report import write_json
from servegate.reports.terminal import STATUS_STYLE, print_report
from servegate.store.writer import DEFAULT_DB, StoreError, open_engine
from servegate.verdict.model import Report, Status

CANARY_ID = "canary-ok"


def _canary_row(report: Report) -> tuple[str, str]:
    for gate in report.gates:
        for finding in gate.findings:
            if finding.probe == CANARY_ID:
                return finding.baseline_excerpt or "", finding.candidate_excerpt or ""
    return "", ""


def _short(text: str, limit: int = 110) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _summary(results: list[tuple[str, str, Report]]) -> Table:
    table = Table(title="servegate demo", title_justify="left", show_lines=True)
    for col in ("candidate", "change", "verdict", "failed gate: why", "`Reply with exactly: OK`"):
        table.add_column(col, overflow="fold")
    for variant, change, report in results:
        failed = [g for g in report.gates if g.status is Status.FAIL]
        why = "\n".join(f"{g.name}: {_short(g.summary)}" for g in failed) or "-"
        base, cand = _canary_row(report)
        canary = f"baseline:  {base!s}\ncandidate: {cand!s}" if cand else "identical to baseline"
        table.add_row(
            variant,
            change,
            Text(str(report.verdict).upper(), STATUS_STYLE[report.verdict]),
            Text(why),
            Text(canary),
        )
    return table


@click.command("demo")
@click.option(
    "--out",
    "out_dir",
    default="servegate-demo",
    show_default=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Folder for the JSON reports and engine logs.",
)
@click.option(
    "--db",
    default=str(DEFAULT_DB),
    show_default=True,
    metavar="PATH|URL",
    help="Where the runs are recorded.",
)
@click.option("--full", is_flag=True, help="Run the whole default suite, not only the canaries.")
@click.option("--quiet", "-q", is_flag=True, help="Only the summary table.")
def demo(out_dir: Path, db: str, full: bool, quiet: bool) -> None:
    """Start a clean engine and two candidates, gate both, show one pass and one fail.

    Exit 0 when the benign candidate passed and the mixed-dtype candidate failed, 1 when
    either verdict was another, 2 without the reference engine (servegate[engine]), 3 when an
    engine did not start.
    """
    from servegate.engine import (
        BENIGN_VARIANT,
        EngineError,
        require_llama_cpp,
        shipped_model_path,
        start_engine,
    )

    try:  # before a folder or the database is made: a core install has no engine
        require_llama_cpp()
        shipped_model_path()
    except EngineError as exc:
        fail(str(exc), exc.exit_code)
    t0 = time.perf_counter()
    candidates = [
        (BENIGN_VARIANT, "benign config change"),
        ("mixed-dtype", "attn_norm F32 weights read as bf16 (fused-kernel bug)"),
    ]
    # The quick demo runs the gates that catch this bug class in well under three minutes on two
    # cores; --full adds the long-context gate and the whole golden suite.
    categories = None if full else ("canary",)
    gates = GATE_ORDER if full else ("startup", "numerics", "golden")
    numerics_prompts = 12 if full else 6
    results: list[tuple[str, str, Report]] = []
    out_dir.mkdir(parents=True, exist_ok=True)
    try:
        store = open_engine(db)
        with ExitStack() as stack:
            engines = {}
            for variant in ["clean"] + [v for v, _ in candidates]:
                stderr.print(f"starting llama.cpp engine [bold]{variant}[/] …")
                engines[variant] = stack.enter_context(
                    start_engine(variant, log_path=out_dir / f"engine-{variant}.log")
                )
                stderr.print(f"  {variant} ready at {engines[variant].base_url}")
            for variant, change in candidates:
                cfg = GateConfig(
                    baseline=EndpointConfig(url=engines["clean"].base_url),
                    candidate=EndpointConfig(url=engines[variant].base_url),
                    categories=categories,
                    gates=gates,
                    numerics_prompts=numerics_prompts,
                )
                with gate_progress(not quiet, label=f"{variant}: ") as progress:
                    report = asyncio.run(
                        run(cfg, store=store, run_name=f"demo {variant}", progress=progress)
                    )
                write_json(report, out_dir / f"{variant}.json")
                if not quiet:
                    print_report(report, for_tables(stdout), max_findings=4)
                results.append((variant, change, report))
    except (EngineError, PreflightError, StoreError) as exc:
        fail(str(exc), exc.exit_code)
    stdout.print(_summary(results))
    benign_ok = results[0][2].verdict is Status.PASS
    bug_caught = results[1][2].verdict is Status.FAIL
    elapsed = time.perf_counter() - t0
    if benign_ok and bug_caught:
        stdout.print(
            f"[green]demo ok[/]: the benign change passed and the mixed-dtype bug was caught "
            f"({elapsed:.0f} s). Reports in {out_dir}/, runs in {db} (`servegate runs`)."
        )
        raise SystemExit(0)
    stdout.print(
        f"[red]demo failed[/]: benign passed={benign_ok}, bug caught={bug_caught} ({elapsed:.0f} s)"
    )
    raise SystemExit(1)
