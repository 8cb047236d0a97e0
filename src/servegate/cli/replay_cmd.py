"""`servegate replay`: the offline shadow over captured traffic."""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
from pathlib import Path

import click

from servegate.cli.console import fail


def _key(var: str | None, option: str) -> str | None:
    if var is None:
        return None
    key = os.environ.get(var)
    if not key:
        fail(f"{option}: environment variable {var} is not set", 2)
    return key


@click.command("replay")
@click.argument("traffic", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--baseline", required=True, help="Base URL of the baseline (…/v1).")
@click.option("--candidate", required=True, help="Base URL of the candidate (…/v1).")
@click.option("--baseline-key-env", default=None, metavar="VAR", help="Baseline's API key.")
@click.option("--candidate-key-env", default=None, metavar="VAR", help="Candidate's API key.")
@click.option("--concurrency", type=click.IntRange(1), default=1, show_default=True)
@click.option("--timeout-s", type=click.FloatRange(0.001), default=120.0, show_default=True)
@click.option(
    "--policy", "policy_path", type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="Verdict policy YAML: its sampling.* keys (alpha, min_expected, power) judge the sampled "
    "pairs.",
)  # fmt: skip
@click.option(
    "--json", "json_out", type=click.Path(dir_okay=False, path_type=Path), default=None,
    help="Write the summary and every pair's comparison here.",
)  # fmt: skip
def replay_command(
    traffic: Path,
    baseline: str,
    candidate: str,
    baseline_key_env: str | None,
    candidate_key_env: str | None,
    concurrency: int,
    timeout_s: float,
    policy_path: Path | None,
    json_out: Path | None,
) -> None:
    """Replay captured requests (`servegate proxy --capture`, or one OpenAI request body per
    line) against BASELINE and CANDIDATE and compare each pair as the proxy does. Temperature-0
    pairs are judged answer by answer; sampled pairs (temperature above 0, or none given) as
    distributions: degenerate, empty and unparsable answers, stopping and length by exact paired
    tests, and a request repeated 10 times or more by the distribution of its answers' first
    words (docs/proxy.md). Exit 0 pass, 1 fail (the candidate errs, degenerates, or breaks
    JSON/tool-call parsing where the baseline did not, or samples another distribution), 2 bad
    input, 3 inconclusive (the baseline answered nothing)."""
    from servegate.config.loader import ConfigError, load_policy
    from servegate.config.models import Policy
    from servegate.proxy.replay import TrafficFileError, judge, parse_traffic, replay
    from servegate.proxy.settings import ProxySettingsError, Upstream

    try:
        policy = Policy() if policy_path is None else load_policy(policy_path)
    except ConfigError as exc:
        fail(f"--policy: {exc}", 2)
    try:
        captured = parse_traffic(traffic)
        base = Upstream.parse("baseline", baseline)
        cand = Upstream.parse("candidate", candidate)
    except (TrafficFileError, ProxySettingsError) as exc:
        fail(str(exc), 2)
    if json_out is not None and not json_out.parent.is_dir():
        fail(f"--json: folder {json_out.parent} does not exist", 2)
    pairs = asyncio.run(
        replay(
            captured,
            base,
            cand,
            baseline_key=_key(baseline_key_env, "--baseline-key-env"),
            candidate_key=_key(candidate_key_env, "--candidate-key-env"),
            concurrency=concurrency,
            timeout_s=timeout_s,
        )
    )
    summary = judge(pairs, policy.sampling)
    rate = (
        f"{summary.exact_matches}/{summary.greedy_pairs} exact (reported, not judged)"
        if summary.greedy_pairs
        else "no temperature-0 pairs"
    )
    click.echo(
        f"replay: {summary.pairs} requests, {summary.both_answered} answered by both; {rate}; "
        f"verdict {summary.verdict}"
    )
    for reason in summary.reasons:
        click.echo(f"  {reason}")
    if summary.sampled_pairs:
        click.echo(f"sampled pairs: {summary.sampled_pairs}, judged as distributions")
        for c in summary.checks:
            if c.name.startswith("sampled_"):
                evidence = c.limit if c.measured else c.reason
                click.echo(f"  {c.outcome.value}: {c.title} ({evidence})")
    if json_out is not None:
        data = {
            "summary": summary.as_dict(),
            "pairs": [
                {"line": p.captured.line, "path": p.captured.path, **p.comparison.as_dict()}
                for p in pairs
            ],
        }
        fd, tmp = tempfile.mkstemp(dir=json_out.parent, prefix=".replay-", suffix=".json")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=2, default=str)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, json_out)
    raise SystemExit(summary.exit_code)
