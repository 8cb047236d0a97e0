"""The `servegate` command group. Only the cli package prints, calls asyncio.run or exits."""

from __future__ import annotations

import sys

import click

from servegate import __version__
from servegate.config.redaction import environment_secrets, hide


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
        _db_from_environment(command)
        cli.add_command(command)


# The run database, when --db is not given: a URL with a password belongs in the environment
# (a Kubernetes Secret), not in argv where `ps` and /proc show it.
DB_ENV = "SERVEGATE_DB_URL"


def _db_from_environment(command: click.Command) -> None:
    """Every `--db` of `command` (and of its subcommands) reads DB_ENV when not given."""
    for param in command.params:
        if isinstance(param, click.Option) and "--db" in param.opts:
            param.envvar = DB_ENV
            param.show_envvar = True
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            _db_from_environment(sub)


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
        click.echo(f"servegate: internal error: {crash_line(exc)}", err=True)
        sys.exit(4)


def crash_line(exc: BaseException) -> str:
    """`ExceptionClass: message` on one line, secrets hidden (an exception's text can carry a
    database URL with its password, a request header or a launch command)."""
    message = hide(" ".join(str(exc).split()), environment_secrets())
    return f"{type(exc).__name__}: {message}"[:2000]
