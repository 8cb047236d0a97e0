"""`servegate baseline record|list|show|delete`: named baselines a candidate is compared with
later (`servegate gate --baseline-run NAME --candidate URL`), while the old server is gone."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import click
from sqlalchemy import Engine

from servegate.cli.console import fail, gate_progress, stderr, stdout
from servegate.cli.gate_options import option
from servegate.config.loader import ConfigError, load_policy, validate
from servegate.config.models import GateConfig, Policy
from servegate.endpoints.errors import EndpointError
from servegate.endpoints.urls import display_url, normalise_url
from servegate.orchestration.inputs import check_inputs
from servegate.orchestration.runner import PreflightError, run
from servegate.reports.plain import plain
from servegate.store.baselines import (
    StoredBaseline,
    delete_baseline,
    left_out,
    list_baselines,
    load_baseline,
    save_baseline,
    untrustworthy,
)
from servegate.store.reader import find_run
from servegate.store.writer import StoreError, open_engine
from servegate.verdict.model import Report, Status
from servegate.verdict.rules import EXIT_INCONCLUSIVE, EXIT_USAGE

RECORDED_GATES = ("startup", "numerics", "embeddings", "golden", "context")
db_option = option("db").worded(
    "The run database holding the baselines (SQLite path or SQLAlchemy URL)."
)


@click.group("baseline")
def baseline() -> None:
    """Record a baseline endpoint once; compare candidates with it later, server gone or not."""


def _gates(value: str) -> tuple[str, ...]:
    names = tuple(v.strip() for v in value.split(",") if v.strip())
    bad = [n for n in names if n not in RECORDED_GATES]
    if bad or not names:
        raise click.BadParameter(
            f"cannot record {', '.join(bad) or '(none)'}; choose from {', '.join(RECORDED_GATES)}"
            " (performance is compared only between live servers)"
        )
    return names


# The recording's settings and the options that set them: --endpoint is both sides (the
# endpoint is compared with itself), so a bad URL is one problem with one name.
_RECORD_FLAGS = {
    "baseline.url": "--endpoint",
    "candidate.url": "--endpoint",
    "baseline.api_key_env": "--api-key-env",
    "candidate.api_key_env": "--api-key-env",
    "model": "--model",
    "suite": "--suite",
    "categories": "--category",
    "numerics_prompts": "--numerics-prompts",
}


@baseline.command("record")
@click.option("--endpoint", "url", required=True, metavar="URL", help="The baseline server.")
@click.option("--name", required=True, help="The baseline's name, for --baseline-run NAME.")
# The questions `gate` asks too, declared there (gate_options.py), worded for a recording.
@option("model").worded("Model name to send (default: the first listed).")
@option("api_key_env").worded("Variable holding the API key.")
@option("gate_names").worded(
    "Correctness gates to record; a later run may ask for any of them.",
    default=",".join(RECORDED_GATES),
)
@option("suite")
@option("categories").worded("Only these golden categories.")
@option("policy_path").worded("Verdict policy YAML; runs against this baseline must use the same.")
@option("numerics_prompts").worded("How many of the shipped numerics prompts to record.")
@click.option("--replace", is_flag=True, help="Replace a baseline of the same name.")
@db_option
@option("quiet").worded("No progress display.")
def record(
    url: str,
    name: str,
    model: str | None,
    api_key_env: str | None,
    gate_names: str,
    suite: Path | None,
    categories: tuple[str, ...],
    policy_path: Path | None,
    numerics_prompts: int,
    replace: bool,
    db: str,
    quiet: bool,
) -> None:
    """Ask ENDPOINT everything the gates ask, twice (it is its own A/A check), and store its
    answers, logprobs and noise floor under NAME. Stored only when the endpoint passes against
    itself and gave no transport failure or timeout that the same request asked again did not
    give. An empty or error answer is stored but never used as truth: the probes answered so
    are named here, and later runs list the checks they fed as not measured.

    Exit codes: 0 recorded, 1 the endpoint fails against itself, 2 usage error,
    3 not recorded (unreachable, or an answer that cannot be truth)."""
    try:
        gates = _gates(gate_names)
    except click.BadParameter as exc:
        fail(f"--gates: {exc.message}", EXIT_USAGE)
    try:
        side = {"url": url, "api_key_env": api_key_env}
        cfg = validate(
            GateConfig,
            {
                "baseline": side,
                "candidate": side,
                "model": model,
                "gates": gates,
                "suite": suite,
                "categories": categories or None,
                "numerics_prompts": numerics_prompts,
                "policy": load_policy(policy_path) if policy_path else Policy(),
                # Its noise is measured whatever its own answers: a later candidate may need it.
                "baseline_paths": "always",
            },
            "command line",
            _RECORD_FLAGS,
        )
        check_inputs(cfg)  # before the database is created or the endpoint asked
        store = open_engine(db)
        if not replace and name in {b.name for b in list_baselines(store)}:
            fail(
                f"a baseline named {name!r} exists: choose another --name, or give --replace",
                EXIT_USAGE,
            )
        with gate_progress(not quiet) as progress:
            recording = run(
                cfg, store=store, run_name=f"baseline {name}", progress=progress, recording=True
            )
            report = asyncio.run(recording)
        _refuse_untrusted(store, report, url)
        stored = _stored(store, report, name, url, cfg)
        save_baseline(store, stored, replace=replace)
        unused = left_out(store, report.run_id)
    except (ConfigError, EndpointError, StoreError, PreflightError) as exc:
        fail(str(exc), exc.exit_code)
    if not quiet:
        stdout.print(
            f"recorded baseline {name!r}: {stored.endpoint_url}, model {plain(stored.model)}, "
            f"gates {', '.join(gates)} (run {report.run_id}, {report.duration_s:.0f} s)",
            markup=False,
            highlight=False,
        )
    if unused:
        more = len(unused) - 10
        listed = ", ".join(unused[:10]) + (f" and {more} more" if more > 0 else "")
        stderr.print(
            plain(
                f"left out of the baseline: its empty or error answers to {len(unused)} "
                f"probe(s): {listed}. Such an answer is never truth, so runs against this "
                "baseline list the checks they fed as not measured",
                one_line=True,
            ),
            markup=False,
            highlight=False,
        )


def _refuse_untrusted(store: Engine, report: Report, url: str) -> None:
    """Not recorded (exit 1 or 3): the endpoint did not pass against itself, or an answer of
    the recording cannot be truth."""
    if report.verdict is not Status.PASS:
        fail(
            f"not recorded: {display_url(url)} does not pass against itself "
            f"({report.verdict}: {report.reason}; run {report.run_id})",
            report.exit_code or EXIT_INCONCLUSIVE,
        )
    why = untrustworthy(store, report.run_id)
    if why is not None:
        fail(f"not recorded: {why} (run {report.run_id})", EXIT_INCONCLUSIVE)


def _stored(store: Engine, report: Report, name: str, url: str, cfg: GateConfig) -> StoredBaseline:
    """The baseline `name` as its recording run left it: endpoint, model, fingerprints, config."""
    fingerprints = json.loads(find_run(store, report.run_id)["fingerprint_json"] or "{}")
    return StoredBaseline(
        name=name,
        run_id=report.run_id,
        created_at=report.finished_at,
        endpoint_url=display_url(normalise_url(url)),
        model=report.baseline.model,
        fingerprints=fingerprints,
        config=cfg.model_dump(mode="json"),
    )


def _summary(b: StoredBaseline) -> dict[str, object]:
    return {
        "name": b.name,
        "created_at": b.created_at,
        "endpoint": b.endpoint_url,
        "model": b.model,
        "run_id": b.run_id,
        "gates": list(b.config.get("gates") or ()),
        "suite": b.fingerprints.get("suite"),
        "servegate": b.fingerprints.get("servegate"),
    }


@baseline.command("list")
@db_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON for machines.")
def list_command(db: str, as_json: bool) -> None:
    """The stored baselines, newest first."""
    try:
        found = list_baselines(open_engine(db, create=False))
    except StoreError as exc:
        fail(str(exc), exc.exit_code)
    if as_json:
        click.echo(json.dumps([_summary(b) for b in found], indent=2))
        return
    if not found:
        click.echo("no baselines (servegate baseline record --endpoint URL --name NAME)")
    for b in found:
        line = f"{b.name}  {b.created_at}  {b.endpoint_url}  {b.model}  run {b.run_id}"
        stdout.print(plain(line, one_line=True), markup=False, highlight=False)


@baseline.command("show")
@click.argument("name")
@db_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON for machines.")
def show(name: str, db: str, as_json: bool) -> None:
    """One baseline: where it was recorded from, its fingerprint and configuration, and the
    probes whose empty or error answers are never used as its truth (left_out)."""
    try:
        store = open_engine(db, create=False)
        b = load_baseline(store, name)
        unused = left_out(store, b.run_id)
    except StoreError as exc:
        fail(str(exc), exc.exit_code)
    summary = {**_summary(b), "left_out": unused}
    if as_json:
        click.echo(json.dumps({**summary, "fingerprint": b.fingerprints, "config": b.config},
                              indent=2))  # fmt: skip
        return
    for key, value in summary.items():
        shown = ", ".join(value) if isinstance(value, list) else value
        if key == "left_out":
            key, shown = "left out", f"{len(unused)} probe(s){': ' if unused else ''}{shown}"
        stdout.print(plain(f"{key:<11}{shown}", one_line=True), markup=False, highlight=False)
    policy = b.config.get("policy") or {}
    stdout.print(f"{'policy':<11}{len(policy)} keys (--json shows them)", markup=False)


@baseline.command("delete")
@click.argument("name")
@db_option
def delete(name: str, db: str) -> None:
    """Forget a baseline's name; its recorded run stays in `servegate runs`."""
    try:
        delete_baseline(open_engine(db, create=False), name)
    except StoreError as exc:
        fail(str(exc), exc.exit_code)
    click.echo(f"deleted baseline {name!r}")
