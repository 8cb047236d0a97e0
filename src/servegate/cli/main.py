"""The `servegate` command group. Only the cli package prints, calls asyncio.run or exits."""

from __future__ import annotations

import sys

import click

from servegate import __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="servegate")
def cli() -> None:
    """Gate a change to an LLM serving engine: compare a baseline endpoint with a candidate,
    correctness before performance, and exit 0 (ship), 1 (roll back), 2 (usage error),
    3 (inconclusive) or 4 (internal error)."""


def _register() -> None:
    # Explicit registry: each command lives in its own module under servegate.cli.
    from servegate.cli import (
        baseline_cmd,
        bench_cmd,
        demo_cmd,
        diff_cmd,
        engine_cmd,
        gate_cmd,
        matrix_cmd,
        policy_cmd,
        probe_cmd,
        proxy_cmd,
        replay_cmd,
        report_cmd,
        runs_cmd,
    )

    for command in (
        gate_cmd.gate,
        demo_cmd.demo,
        probe_cmd.probe,
        runs_cmd.runs,
        baseline_cmd.baseline,
        matrix_cmd.matrix,
        report_cmd.report,
        diff_cmd.diff,
        engine_cmd.engine,
        policy_cmd.policy,
        bench_cmd.bench_command,
        proxy_cmd.proxy_command,
        replay_cmd.replay_command,
    ):
        cli.add_command(command)


def main() -> None:
    """Console-script entry point."""
    _register()
    try:
        cli.main(prog_name="servegate", standalone_mode=True)
    except SystemExit:
        raise
    except KeyboardInterrupt:  # the run row is already marked crashed; nothing more to say
        click.echo("servegate: interrupted", err=True)
        sys.exit(130)
    except BaseException as exc:  # a crash never exits 0
        click.echo(f"servegate: internal error: {type(exc).__name__}: {exc}", err=True)
        sys.exit(4)
