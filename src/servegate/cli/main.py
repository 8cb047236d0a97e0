"""The `servegate` command group. Only the cli package prints, calls asyncio.run or exits."""

from __future__ import annotations

import math
import sys
from typing import Any

import click

from servegate import __version__
from servegate.config.redaction import environment_secrets, hide

EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report a command ended by Ctrl-C


class _Servegate(click.Group):
    """The root group: Ctrl-C ends any command with EXIT_INTERRUPTED and one line, where click
    would print "Aborted!" and exit 1 — the exit code of a rollback."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:  # a run's row is already marked crashed; nothing more to say
            click.echo("servegate: interrupted", err=True)
            raise click.exceptions.Exit(EXIT_INTERRUPTED) from None


@click.group(
    cls=_Servegate,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.version_option(__version__, prog_name="servegate")
def cli() -> None:
    """Gate a change to an LLM serving engine: compare a baseline endpoint with a candidate,
    correctness before performance, and exit 0 (ship), 1 (roll back), 2 (usage error),
    3 (inconclusive), 4 (internal error) or 130 (interrupted by Ctrl-C)."""


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
        _finite_floats(command)
        cli.add_command(command)


# The run database, when --db is not given: a URL with a password belongs in the environment
# (a Kubernetes Secret), not in argv where `ps` and /proc show it.
DB_ENV = "SERVEGATE_DB_URL"


def _finite(number: Any, param_type: click.ParamType[Any, Any], value: Any,
            param: click.Parameter | None, ctx: click.Context | None) -> Any:  # fmt: skip
    if isinstance(number, float) and not math.isfinite(number):
        param_type.fail(f"{value!r} is not a finite number", param, ctx)
    return number


class FiniteFloat(click.types.FloatParamType):
    """FLOAT, finite: click's FLOAT accepts `nan` and `inf`, and a nan deadline or rate makes
    every comparison false."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        return _finite(super().convert(value, param, ctx), self, value, param, ctx)


class FiniteFloatRange(click.FloatRange):
    """FloatRange, finite (nan passes every range check: each comparison with it is false)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        return _finite(super().convert(value, param, ctx), self, value, param, ctx)


def _finite_floats(command: click.Command) -> None:
    """Every float option of `command` (and of its subcommands) refuses nan and inf."""
    for param in command.params:
        kind = param.type
        if isinstance(kind, click.FloatRange) and not isinstance(kind, FiniteFloatRange):
            param.type = FiniteFloatRange(kind.min, kind.max, min_open=kind.min_open,
                                          max_open=kind.max_open, clamp=kind.clamp)  # fmt: skip
        elif type(kind) is click.types.FloatParamType:
            param.type = FiniteFloat()
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            _finite_floats(sub)


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
    try:
        _register()
        cli.main(prog_name="servegate", standalone_mode=True)
    except SystemExit:
        raise
    except KeyboardInterrupt:  # outside a command (importing, parsing): the same line and code
        click.echo("servegate: interrupted", err=True)
        sys.exit(EXIT_INTERRUPTED)
    except BaseException as exc:  # a crash never exits 0
        click.echo(f"servegate: internal error: {crash_line(exc)}", err=True)
        sys.exit(4)


def crash_line(exc: BaseException) -> str:
    """`ExceptionClass: message` on one line, secrets hidden (an exception's text can carry a
    database URL with its password, a request header or a launch command)."""
    message = hide(" ".join(str(exc).split()), environment_secrets())
    return f"{type(exc).__name__}: {message}"[:2000]
