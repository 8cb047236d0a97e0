"""`servegate gate`: compare a candidate endpoint with a baseline and exit with the verdict."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from pathlib import Path
from typing import Any

import click
from click.core import ParameterSource

from servegate.cli.bench_plan import positive_ints
from servegate.cli.console import fail, for_tables, gate_progress, stdout
from servegate.cli.gate_baseline import check_baseline_config
from servegate.cli.gate_resume import resumed_config
from servegate.cli.report_files import checked, file_options, write
from servegate.config.loader import (
    ConfigError,
    load_policy,
    merge,
    read_gate_file,
    validate,
    writable_folder,
)
from servegate.config.models import GateConfig, Policy
from servegate.config.slo import SLOError, parse_slo
from servegate.endpoints.errors import EndpointError
from servegate.orchestration.runner import GATE_ORDER, PreflightError, run
from servegate.reports.terminal import print_report
from servegate.store.baselines import load_baseline
from servegate.store.reader import request_latencies
from servegate.store.resume import load_resume_point
from servegate.store.writer import DEFAULT_DB, StoreError, open_engine
from servegate.verdict.rules import EXIT_USAGE

# The settings each command-line option sets; with --config only the options given override.
_OPTION_KEYS: dict[str, tuple[str, ...]] = {
    "baseline": ("baseline_url", "baseline_api_key_env", "api_key_env"),
    "candidate": ("candidate_url", "candidate_api_key_env", "api_key_env"),
    "baseline_replica": ("replica_url",),
    "model": ("model",),
    "gates": ("gate_names",),
    "suite": ("suite",),
    "categories": ("categories",),
    "request_deadline_s": ("deadline_s",),
    "probe_deadline_s": ("probe_deadline_s",),
    "run_deadline_s": ("run_deadline_s",),
    "strict": ("strict",),
    "hung_after_timeouts": ("hung_after",),
    "impossible_prompt_words": ("impossible_words",),
    "numerics_prompts": ("numerics_prompts",),
    "performance": (
        "perf_concurrency",
        "perf_blocks",
        "perf_requests",
        "perf_output_tokens",
        "slo_text",
        "capacity_concurrency",
        "capacity_requests",
    ),
    "run_dir": ("run_dir",),
    "log_patterns": ("log_patterns",),
    "policy": ("policy_path",),
}
_PERFORMANCE_KEYS = {
    "concurrency": "perf_concurrency",
    "blocks": "perf_blocks",
    "requests_per_block": "perf_requests",
    "output_tokens": "perf_output_tokens",
    "slo": "slo_text",
    "capacity_concurrency": "capacity_concurrency",
    "capacity_requests": "capacity_requests",
}


def _given_options(ctx: click.Context) -> set[str]:
    """The options the user set (on the command line or through the environment)."""
    return {
        name
        for name in ctx.params
        if ctx.get_parameter_source(name)
        not in (ParameterSource.DEFAULT, ParameterSource.DEFAULT_MAP, None)
    }


def _endpoint(url: str | None, key_env: str | None) -> dict[str, Any] | None:
    if url is None:
        return None if key_env is None else {"api_key_env": key_env}
    return {"url": url, "api_key_env": key_env}


def _only_given(settings: dict[str, Any], given: set[str]) -> dict[str, Any]:
    """The settings the user gave on the command line, to lay over a --config file."""
    out: dict[str, Any] = {}
    for key, options in _OPTION_KEYS.items():
        if not given.intersection(options) or key not in settings:
            continue
        value = settings[key]
        if key == "performance":
            value = {k: v for k, v in value.items() if _PERFORMANCE_KEYS[k] in given}
        elif isinstance(value, dict):
            value = {k: v for k, v in value.items() if v is not None}
        out[key] = value
    return out


def _given(param: str) -> bool:
    """Was this option given on the command line (not left at its default)?"""
    source = click.get_current_context().get_parameter_source(param)
    return source is ParameterSource.COMMANDLINE


def _concurrencies(text: str) -> tuple[int, ...]:
    """`1,2,4,8`: positive integers, ascending; anything else is a one-line usage error."""
    values = positive_ints("--capacity-concurrency", text)
    if any(b <= a for a, b in itertools.pairwise(values)):
        fail(f"--capacity-concurrency: {text!r} must ascend (e.g. 1,2,4,8)", EXIT_USAGE)
    return values


def _performance(
    concurrency: int,
    blocks: int,
    requests: int,
    output_tokens: int,
    slo_text: str | None,
    capacity_concurrency: str | None,
    capacity_requests: int | None,
) -> dict[str, Any]:
    """The performance settings from the command line; the capacity ones only when given, so
    the configuration keeps its own defaults. A bad SLO or concurrency list fails here, before
    anything is sent or written."""
    out: dict[str, Any] = {
        "concurrency": concurrency,
        "blocks": blocks,
        "requests_per_block": requests,
        "output_tokens": output_tokens,
    }
    if slo_text is not None:
        try:
            out["slo"] = parse_slo(slo_text)
        except SLOError as exc:
            fail(f"--slo: {exc}", EXIT_USAGE)
    if capacity_concurrency is not None:
        out["capacity_concurrency"] = _concurrencies(capacity_concurrency)
    if capacity_requests is not None:
        out["capacity_requests"] = capacity_requests
    return out


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
    "--config",
    "config_path",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="A YAML file with the run's settings (keys as in the docs: baseline and candidate "
    "with url or a launch block, matrix, gates, policy, ...); options given on the command "
    "line override it.",
)
@click.option(
    "--baseline",
    "baseline_url",
    default=None,
    metavar="URL",
    help="Baseline OpenAI-compatible base URL, e.g. http://127.0.0.1:8000/v1.",
)
@click.option(
    "--candidate",
    "candidate_url",
    default=None,
    metavar="URL",
    help="Candidate base URL (the change under test). --baseline and --candidate are required "
    "unless --resume is given.",
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
    "--slo",
    "slo_text",
    default=None,
    metavar="SLO",
    help="Performance gate: also find each side's max concurrency under this SLO, e.g. "
    "ttft_ms=500,tpot_ms=50,e2el_ms=5000 (a sweep after the blocks; none without an SLO).",
)
@click.option(
    "--capacity-concurrency",
    default=None,
    metavar="N,N,...",
    help="Performance gate with --slo: the ascending concurrencies of the sweep "
    "[default: 1,2,4,8].",
)
@click.option(
    "--capacity-requests",
    default=None,
    type=click.IntRange(min=1, max=1024),
    help="Performance gate with --slo: measured requests per sweep step and side [default: 16].",
)
@click.option(
    "--db",
    default=str(DEFAULT_DB),
    show_default=True,
    metavar="PATH|URL",
    help="Where runs are recorded (SQLite path or SQLAlchemy URL).",
)
@click.option("--no-store", is_flag=True, help="Do not record the run.")
@click.option(
    "--baseline-run",
    "baseline_run",
    default=None,
    metavar="NAME",
    help="Compare with a stored baseline (`servegate baseline record`) instead of --baseline: "
    "its server may be gone. Refused when the suite, policy, model or servegate version differ "
    "from its recording; the performance gate is not measured against it.",
)
@click.option(
    "--run-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path(".servegate") / "runs",
    show_default=True,
    help="Where the logs of engines servegate launches go (a folder per run).",
)
@click.option(
    "--log-patterns",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="A YAML catalogue of start-up log patterns added to the shipped one.",
)
@click.option(
    "--resume",
    "resume_ref",
    default=None,
    metavar="RUN",
    help="Continue a killed or crashed run (its id from `servegate runs`): the gates it finished "
    "keep their results, the others run again. Give it alone to reuse the run's stored "
    "configuration, or with the command line that started the run; refused when the "
    "configuration, an endpoint's models or the suite changed.",
)
@click.option("--name", "run_name", default=None, help="A name for this run in `servegate runs`.")
@click.option(
    "--quiet", "-q", is_flag=True, help="No progress display and no table; exit code only."
)
@click.option("--show-info", is_flag=True, help="Also list informational findings.")
def gate(
    config_path: Path | None,
    baseline_url: str | None,
    candidate_url: str | None,
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
    slo_text: str | None,
    capacity_concurrency: str | None,
    capacity_requests: int | None,
    db: str,
    no_store: bool,
    baseline_run: str | None,
    run_dir: Path,
    log_patterns: Path | None,
    resume_ref: str | None,
    run_name: str | None,
    quiet: bool,
    show_info: bool,
) -> None:
    """Compare CANDIDATE with BASELINE: the correctness gates, then performance.

    Exit codes: 0 pass (ship), 1 fail (roll back), 2 usage or configuration error,
    3 inconclusive (unreachable, too few samples, missing capability), 4 internal error.
    """
    if baseline_run is not None:
        if any(v is not None for v in (baseline_url, replica_url, resume_ref, config_path)):
            fail(
                "--baseline-run replaces --baseline: give it with --candidate only (not with "
                "--baseline-replica, --resume or --config)",
                EXIT_USAGE,
            )
        if candidate_url is None:
            fail("--baseline-run NAME needs --candidate URL", EXIT_USAGE)
        if no_store:
            fail("--baseline-run needs the database that holds it: drop --no-store", EXIT_USAGE)
    elif config_path is None and (
        (baseline_url is None) != (candidate_url is None)
        or (baseline_url is None and resume_ref is None)
    ):
        fail(
            "give both --baseline URL and --candidate URL, or --config FILE (or --resume RUN "
            "alone)",
            EXIT_USAGE,
        )
    if resume_ref is not None and no_store:
        fail("--resume needs the run's database: drop --no-store", EXIT_USAGE)
    try:
        gates = _gates(gate_names)
    except click.BadParameter as exc:
        fail(f"--gates: {exc.message}", EXIT_USAGE)
    performance = _performance(
        perf_concurrency, perf_blocks, perf_requests, perf_output_tokens, slo_text,
        capacity_concurrency, capacity_requests,
    )  # fmt: skip
    # Checked before the run, which can take half an hour: a bad path fails now.
    outputs = checked(
        {"json": json_path, "html": html_path, "markdown": markdown_path, "junit": junit_path}
    )
    given = _given_options(click.get_current_context())
    try:
        # The database is opened once the configuration is known to be good (a bad file or
        # option writes nothing), unless the configuration comes from it (--baseline-run,
        # --resume).
        needs_store = baseline_run is not None or resume_ref is not None
        store = open_engine(db) if needs_store and not no_store else None
        stored = None
        if baseline_run is not None and store is not None:
            stored = load_baseline(store, baseline_run)
            baseline_url = stored.endpoint_url
        cfg: GateConfig | None = None
        settings: dict[str, Any] = {
            "baseline": _endpoint(baseline_url, baseline_api_key_env or api_key_env),
            "candidate": _endpoint(candidate_url, candidate_api_key_env or api_key_env),
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
            "performance": performance,
            "run_dir": run_dir,
            "log_patterns": log_patterns,
            "baseline_run": baseline_run,
        }
        if policy_path is not None or config_path is None:
            settings["policy"] = load_policy(policy_path) if policy_path else Policy()
        source = "command line"
        if config_path is not None:
            source = str(config_path)
            settings = merge(read_gate_file(config_path), _only_given(settings, given))
        if config_path is not None or baseline_url is not None:
            for side, option in (("baseline", "--baseline"), ("candidate", "--candidate")):
                if not settings.get(side):
                    raise ConfigError(f"{option} URL is required (or a {side} in --config FILE)")
            cfg = validate(GateConfig, settings, source)
        if stored is not None and cfg is not None:
            check_baseline_config(stored, cfg)
        if store is None and not no_store:
            store = open_engine(db)
        point = None
        if resume_ref is not None and store is not None:
            point = load_resume_point(store, resume_ref)
            deadline = run_deadline_s if _given("run_deadline_s") else None
            cfg = resumed_config(point, cfg, run_deadline_s=deadline)
            run_name = point.name
        assert cfg is not None  # checked above: URLs given, or --resume
        if any(side is not None and side.launch is not None
               for side in (cfg.baseline, cfg.candidate, cfg.baseline_replica)):  # fmt: skip
            writable_folder(cfg.run_dir, "--run-dir")  # before any engine is started
        with gate_progress(not quiet) as progress:
            report = asyncio.run(
                run(cfg, store=store, run_name=run_name, progress=progress, resume=point)
            )
    except (ConfigError, EndpointError, StoreError, PreflightError) as exc:
        fail(str(exc), exc.exit_code)
    latencies = None
    if store is not None and "html" in outputs:
        # The HTML page says when it has no timings; failing to read them loses no report.
        with contextlib.suppress(StoreError):
            latencies = request_latencies(store, report.run_id)
    if not quiet:
        print_report(report, for_tables(stdout), show_info=show_info)
    write(report, outputs, latencies, quiet=quiet)
    raise SystemExit(report.exit_code)
