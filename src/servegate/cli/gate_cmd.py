"""`servegate gate`: compare a candidate endpoint with a baseline and exit with the verdict."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
from click.core import ParameterSource
from sqlalchemy import Engine

from servegate.cli.bench_plan import positive_ints
from servegate.cli.console import fail, for_tables, gate_progress, stdout
from servegate.cli.gate_baseline import check_baseline_config
from servegate.cli.gate_options import GateOptions, gate_options
from servegate.cli.gate_resume import resumed_config
from servegate.cli.report_files import checked, write
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
from servegate.orchestration.inputs import check_inputs
from servegate.orchestration.runner import GATE_ORDER, PreflightError, run
from servegate.reports.terminal import print_report
from servegate.store.baselines import load_baseline
from servegate.store.reader import request_latencies
from servegate.store.resume import ResumePoint, load_resume_point
from servegate.store.writer import StoreError, open_engine
from servegate.verdict.model import Report
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
    "complete": ("complete",),
    "budget_s": ("budget",),
    "hung_after_timeouts": ("hung_after",),
    "impossible_prompt_words": ("impossible_words",),
    "numerics_prompts": ("numerics_prompts",),
    "performance": (
        "perf_concurrency",
        "perf_blocks",
        "perf_max_blocks",
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
    "max_blocks": "perf_max_blocks",
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


def config_flags(given: set[str] | None = None) -> dict[str, tuple[str, ...]]:
    """Config key path -> the options that set it (of those in `given`, when it is given): the
    reference page lists them, and a bad value is named as the user typed it (`--deadline-s`,
    not request_deadline_s)."""
    params = {p.name: p.opts[0] for p in gate.params if p.name is not None}
    out: dict[str, tuple[str, ...]] = {}

    def add(key: str, name: str) -> None:
        if given is None or name in given:
            out[key] = (*out.get(key, ()), params[name])

    for key, names in _OPTION_KEYS.items():
        for name in names:
            if key == "performance":
                sub = next(s for s, n in _PERFORMANCE_KEYS.items() if n == name)
                add(f"{key}.{sub}", name)
            elif key in ("baseline", "candidate", "baseline_replica"):
                add(f"{key}.{'url' if name.endswith('_url') else 'api_key_env'}", name)
            else:
                add(key, name)
    if "baseline_run" not in _OPTION_KEYS:  # given to the run directly, not laid over a file
        add("baseline_run", "baseline_run")
    return out


def _option_flags(given: set[str]) -> dict[str, str]:
    return {key: flags[0] for key, flags in config_flags(given).items()}


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


def _performance(opts: GateOptions) -> dict[str, Any]:
    """The performance settings from the command line; the capacity ones only when given, so
    the configuration keeps its own defaults. A bad SLO or concurrency list fails here, before
    anything is sent or written."""
    out: dict[str, Any] = {
        "concurrency": opts.perf_concurrency,
        "blocks": opts.perf_blocks,
        "max_blocks": opts.perf_max_blocks,
        "requests_per_block": opts.perf_requests,
        "output_tokens": opts.perf_output_tokens,
    }
    if opts.slo_text is not None:
        try:
            out["slo"] = parse_slo(opts.slo_text)
        except SLOError as exc:
            fail(f"--slo: {exc}", EXIT_USAGE)
    if opts.capacity_concurrency is not None:
        out["capacity_concurrency"] = _concurrencies(opts.capacity_concurrency)
    if opts.capacity_requests is not None:
        out["capacity_requests"] = opts.capacity_requests
    return out


def _gates(value: str) -> tuple[str, ...]:
    names = tuple(v.strip() for v in value.split(",") if v.strip())
    unknown = [n for n in names if n not in GATE_ORDER]
    if unknown or not names:
        raise click.BadParameter(
            f"unknown gate {', '.join(unknown) or '(none)'}; choose from {', '.join(GATE_ORDER)}"
        )
    return names


def _refuse_unusable(opts: GateOptions) -> None:
    """Options that cannot go together are a one-line usage error (exit 2), before any work."""
    if opts.baseline_run is not None:
        if any(
            v is not None
            for v in (opts.baseline_url, opts.replica_url, opts.resume_ref, opts.config_path)
        ):
            fail(
                "--baseline-run replaces --baseline: give it with --candidate only (not with "
                "--baseline-replica, --resume or --config)",
                EXIT_USAGE,
            )
        if opts.candidate_url is None:
            fail("--baseline-run NAME needs --candidate URL", EXIT_USAGE)
        if opts.no_store:
            fail("--baseline-run needs the database that holds it: drop --no-store", EXIT_USAGE)
    elif opts.config_path is None and (
        (opts.baseline_url is None) != (opts.candidate_url is None)
        or (opts.baseline_url is None and opts.resume_ref is None)
    ):
        fail(
            "give both --baseline URL and --candidate URL, or --config FILE (or --resume RUN "
            "alone)",
            EXIT_USAGE,
        )
    if opts.resume_ref is not None and opts.no_store:
        fail("--resume needs the run's database: drop --no-store", EXIT_USAGE)


def _settings(
    opts: GateOptions, baseline_url: str | None, gates: tuple[str, ...], performance: dict[str, Any]
) -> dict[str, Any]:
    """The run's settings as the command line gives them (the policy only when it is the
    command line's to give)."""
    key_env = opts.api_key_env
    settings: dict[str, Any] = {
        "baseline": _endpoint(baseline_url, opts.baseline_api_key_env or key_env),
        "candidate": _endpoint(opts.candidate_url, opts.candidate_api_key_env or key_env),
        "baseline_replica": (
            {"url": opts.replica_url, "api_key_env": opts.baseline_api_key_env or key_env}
            if opts.replica_url
            else None
        ),
        "model": opts.model,
        "gates": gates,
        "suite": opts.suite,
        "categories": opts.categories or None,
        "request_deadline_s": opts.deadline_s,
        "probe_deadline_s": opts.probe_deadline_s,
        "run_deadline_s": opts.run_deadline_s,
        "strict": opts.strict,
        "complete": opts.complete,
        "budget_s": opts.budget,
        "hung_after_timeouts": opts.hung_after,
        "impossible_prompt_words": opts.impossible_words,
        "numerics_prompts": opts.numerics_prompts,
        "performance": performance,
        "run_dir": opts.run_dir,
        "log_patterns": opts.log_patterns,
        "baseline_run": opts.baseline_run,
    }
    if opts.policy_path is not None or opts.config_path is None:
        settings["policy"] = load_policy(opts.policy_path) if opts.policy_path else Policy()
    return settings


def _config(
    opts: GateOptions, settings: dict[str, Any], given: set[str], baseline_url: str | None
) -> GateConfig | None:
    """The command line's settings laid over --config and validated; None when the run's
    configuration is to come from the run it resumes."""
    source = "command line"
    if opts.config_path is not None:
        source = str(opts.config_path)
        settings = merge(read_gate_file(opts.config_path), _only_given(settings, given))
    if opts.config_path is None and baseline_url is None:
        return None
    for side, option in (("baseline", "--baseline"), ("candidate", "--candidate")):
        if not settings.get(side):
            raise ConfigError(f"{option} URL is required (or a {side} in --config FILE)")
    return validate(GateConfig, settings, source, _option_flags(given))


@dataclass(frozen=True)
class _Prepared:
    """A run ready to start: its configuration, database, the run it resumes and its name."""

    cfg: GateConfig
    store: Engine | None
    resume: ResumePoint | None
    run_name: str | None


def _prepare(
    opts: GateOptions, gates: tuple[str, ...], performance: dict[str, Any], given: set[str]
) -> _Prepared:
    """The configuration (from the options, --config, a stored baseline or the resumed run)
    and the database, each checked; raises ConfigError or StoreError when the run cannot start."""
    # The database is opened once the configuration is known to be good (a bad file or
    # option writes nothing), unless the configuration comes from it (--baseline-run,
    # --resume).
    needs_store = opts.baseline_run is not None or opts.resume_ref is not None
    store = open_engine(opts.db, create=False) if needs_store and not opts.no_store else None
    stored = None
    baseline_url = opts.baseline_url
    if opts.baseline_run is not None and store is not None:
        stored = load_baseline(store, opts.baseline_run)
        baseline_url = stored.endpoint_url
    settings = _settings(opts, baseline_url, gates, performance)
    cfg = _config(opts, settings, given, baseline_url)
    if stored is not None and cfg is not None:
        check_baseline_config(stored, cfg)
    if cfg is not None:
        check_inputs(cfg)  # before the database is created or a server asked
    if store is None and not opts.no_store:
        store = open_engine(opts.db)
    point, run_name = None, opts.run_name
    if opts.resume_ref is not None and store is not None:
        point = load_resume_point(store, opts.resume_ref)
        deadline = opts.run_deadline_s if _given("run_deadline_s") else None
        cfg = resumed_config(point, cfg, run_deadline_s=deadline)
        run_name = point.name
    assert cfg is not None  # checked above: URLs given, or --resume
    if any(side is not None and side.launch is not None
           for side in (cfg.baseline, cfg.candidate, cfg.baseline_replica)):  # fmt: skip
        writable_folder(cfg.run_dir, "--run-dir")  # before any engine is started
    return _Prepared(cfg, store, point, run_name)


def _show(
    report: Report, store: Engine | None, outputs: dict[str, Path], opts: GateOptions
) -> None:
    """The report on the terminal (unless --quiet) and in each report file asked for."""
    latencies = None
    if store is not None and "html" in outputs:
        # The HTML page says when it has no timings; failing to read them loses no report.
        with contextlib.suppress(StoreError):
            latencies = request_latencies(store, report.run_id)
    if not opts.quiet:
        print_report(report, for_tables(stdout), show_info=opts.show_info)
    write(report, outputs, latencies, quiet=opts.quiet)


@click.command("gate")
@gate_options
def gate(**params: Any) -> None:
    """Compare CANDIDATE with BASELINE: the correctness gates, then performance.

    Exit codes: 0 pass (ship), 1 fail (roll back), 2 usage or configuration error,
    3 inconclusive (unreachable, too few samples, missing capability), 4 internal error.
    """
    opts = GateOptions(**params)
    _refuse_unusable(opts)
    try:
        gates = _gates(opts.gate_names)
    except click.BadParameter as exc:
        fail(f"--gates: {exc.message}", EXIT_USAGE)
    performance = _performance(opts)
    # Checked before the run, which can take half an hour: a bad path fails now.
    outputs = checked(
        {"json": opts.json_path, "html": opts.html_path, "markdown": opts.markdown_path,
         "junit": opts.junit_path}
    )  # fmt: skip
    given = _given_options(click.get_current_context())
    try:
        ready = _prepare(opts, gates, performance, given)
        with gate_progress(not opts.quiet) as progress:
            report = asyncio.run(
                run(ready.cfg, store=ready.store, run_name=ready.run_name, progress=progress,
                    resume=ready.resume)
            )  # fmt: skip
    except (ConfigError, EndpointError, StoreError, PreflightError) as exc:
        fail(str(exc), exc.exit_code)
    _show(report, ready.store, outputs, opts)
    raise SystemExit(report.exit_code)
