"""`servegate gate`: compare a candidate endpoint with a baseline and exit with the verdict."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import click

from servegate.cli.console import fail, gate_progress, stdout
from servegate.cli.report_files import checked, file_options, write
from servegate.config.loader import ConfigError, load_policy, validate
from servegate.config.models import GateConfig, Policy
from servegate.endpoints.errors import EndpointError
from servegate.reports.terminal import print_report
from servegate.runner import GATE_ORDER, PreflightError, run
from servegate.store.reader import request_latencies
from servegate.store.writer import DEFAULT_DB, StoreError, open_engine
from servegate.verdict.rules import EXIT_USAGE


def _gates(value: str) -> tuple[str, ...]:
    names = tuple(v.strip() for v in value.split(",") if v.strip())
    unknown = [n for n in names if n not in GATE_ORDER]
    if unknown or not names:
        raise click.BadParameter(
            f"unknown gate {', '.join(unknown) or '(none)'}; choose from {', '.join(GATE_ORDER)}"
        )
    return names


@click.command("gate")
@click.option(
    "--baseline",
    "baseline_url",
    required=True,
    metavar="URL",
    help="Baseline OpenAI-compatible base URL, e.g. http://127.0.0.1:8000/v1.",
)
@click.option(
    "--candidate",
    "candidate_url",
    required=True,
    metavar="URL",
    help="Candidate base URL (the change under test).",
)
@click.option(
    "--baseline-replica",
    "replica_url",
    default=None,
    metavar="URL",
    help="A second baseline server: its disagreement joins the A/A noise floor.",
)
@click.option("--model", default=None, help="Model name to send (default: first model both list).")
@file_options("json", "html", "markdown", "junit")
@click.option(
    "--api-key-env",
    default=None,
    metavar="VAR",
    help="Environment variable holding the API key for both sides.",
)
@click.option("--baseline-api-key-env", default=None, metavar="VAR", help="Key variable, baseline.")
@click.option(
    "--candidate-api-key-env", default=None, metavar="VAR", help="Key variable, candidate."
)
@click.option(
    "--gates",
    "gate_names",
    default=",".join(GATE_ORDER),
    show_default=True,
    help="Comma-separated gates to run, in order.",
)
@click.option(
    "--suite",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="A golden-suite YAML file instead of the shipped default.",
)
@click.option(
    "--category",
    "categories",
    multiple=True,
    help="Only run golden probes of this category (repeatable), e.g. canary.",
)
@click.option(
    "--policy",
    "policy_path",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Verdict policy YAML overriding the defaults.",
)
@click.option(
    "--deadline-s",
    default=60.0,
    show_default=True,
    type=float,
    help="Total deadline per probe request (a hung server becomes a timeout finding).",
)
@click.option(
    "--probe-deadline-s",
    default=15.0,
    show_default=True,
    type=float,
    help="Deadline for start-up probes (readiness, the impossible request).",
)
@click.option(
    "--run-deadline-s",
    default=1800.0,
    show_default=True,
    type=float,
    help="Deadline for the whole run; finished gates keep their results, the running one is "
    "inconclusive.",
)
@click.option(
    "--strict",
    is_flag=True,
    help="Any check that could not be measured makes its gate inconclusive (by default only a "
    "gate's core measurements do; the others are listed as not measured).",
)
@click.option(
    "--hung-after",
    default=2,
    show_default=True,
    type=click.IntRange(min=1),
    help="Timeouts in a row after which a side gets no more requests in a gate.",
)
@click.option(
    "--impossible-words",
    default=12_000,
    show_default=True,
    type=int,
    help="Words in the over-long prompt that must be rejected (set above the context).",
)
@click.option(
    "--numerics-prompts",
    default=12,
    show_default=True,
    type=click.IntRange(min=1),
    help="How many of the shipped numerics prompts to send (fewer is faster, less thorough).",
)
@click.option(
    "--perf-concurrency",
    default=4,
    show_default=True,
    type=click.IntRange(min=1),
    help="Performance gate: requests in flight per side (closed loop).",
)
@click.option(
    "--perf-blocks",
    default=6,
    show_default=True,
    type=click.IntRange(min=1),
    help="Performance gate: load blocks per side, interleaved A B, B A, ...",
)
@click.option(
    "--perf-requests",
    default=8,
    show_default=True,
    type=click.IntRange(min=1),
    help="Performance gate: measured requests per block.",
)
@click.option(
    "--perf-output-tokens",
    default=24,
    show_default=True,
    type=click.IntRange(min=1),
    help="Performance gate: max_tokens of each (greedy, synthetic) request.",
)
@click.option(
    "--db",
    default=str(DEFAULT_DB),
    show_default=True,
    metavar="PATH|URL",
    help="Where runs are recorded (SQLite path or SQLAlchemy URL).",
)
@click.option("--no-store", is_flag=True, help="Do not record the run.")
@click.option("--name", "run_name", default=None, help="A name for this run in `servegate runs`.")
@click.option(
    "--quiet", "-q", is_flag=True, help="No progress display and no table; exit code only."
)
@click.option("--show-info", is_flag=True, help="Also list informational findings.")
def gate(
    baseline_url: str,
    candidate_url: str,
    replica_url: str | None,
    model: str | None,
    json_path: Path | None,
    html_path: Path | None,
    markdown_path: Path | None,
    junit_path: Path | None,
    api_key_env: str | None,
    baseline_api_key_env: str | None,
    candidate_api_key_env: str | None,
    gate_names: str,
    suite: Path | None,
    categories: tuple[str, ...],
    policy_path: Path | None,
    deadline_s: float,
    probe_deadline_s: float,
    run_deadline_s: float,
    strict: bool,
    hung_after: int,
    impossible_words: int,
    numerics_prompts: int,
    perf_concurrency: int,
    perf_blocks: int,
    perf_requests: int,
    perf_output_tokens: int,
    db: str,
    no_store: bool,
    run_name: str | None,
    quiet: bool,
    show_info: bool,
) -> None:
    """Compare CANDIDATE with BASELINE: the correctness gates, then performance.

    Exit codes: 0 pass (ship), 1 fail (roll back), 2 usage or configuration error,
    3 inconclusive (unreachable, too few samples, missing capability), 4 internal error.
    """
    try:
        gates = _gates(gate_names)
    except click.BadParameter as exc:
        fail(f"--gates: {exc.message}", EXIT_USAGE)
    # Checked before the run, which can take half an hour: a bad path fails now.
    outputs = checked(
        {"json": json_path, "html": html_path, "markdown": markdown_path, "junit": junit_path}
    )
    try:
        policy = load_policy(policy_path) if policy_path else Policy()
        cfg = validate(
            GateConfig,
            {
                "baseline": {
                    "url": baseline_url,
                    "api_key_env": baseline_api_key_env or api_key_env,
                },
                "candidate": {
                    "url": candidate_url,
                    "api_key_env": candidate_api_key_env or api_key_env,
                },
                "baseline_replica": (
                    {"url": replica_url, "api_key_env": baseline_api_key_env or api_key_env}
                    if replica_url
                    else None
                ),
                "model": model,
                "gates": gates,
                "suite": suite,
                "categories": categories or None,
                "request_deadline_s": deadline_s,
                "probe_deadline_s": probe_deadline_s,
                "run_deadline_s": run_deadline_s,
                "strict": strict,
                "hung_after_timeouts": hung_after,
                "impossible_prompt_words": impossible_words,
                "numerics_prompts": numerics_prompts,
                "performance": {
                    "concurrency": perf_concurrency,
                    "blocks": perf_blocks,
                    "requests_per_block": perf_requests,
                    "output_tokens": perf_output_tokens,
                },
                "policy": policy,
            },
            "command line",
        )
        store = None if no_store else open_engine(db)
        with gate_progress(not quiet) as progress:
            report = asyncio.run(run(cfg, store=store, run_name=run_name, progress=progress))
    except (ConfigError, EndpointError, StoreError, PreflightError) as exc:
        fail(str(exc), exc.exit_code)
    latencies = None
    if store is not None and "html" in outputs:
        # The HTML page says when it has no timings; failing to read them loses no report.
        with contextlib.suppress(StoreError):
            latencies = request_latencies(store, report.run_id)
    if not quiet:
        print_report(report, stdout, show_info=show_info)
    write(report, outputs, latencies, quiet=quiet)
    raise SystemExit(report.exit_code)
