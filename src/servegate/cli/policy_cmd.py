"""`servegate policy`: print the policy reference (every key, its default, unit and reason), or
with --config-keys the reference of the gate configuration file."""

from __future__ import annotations

import click

from servegate.config.reference import config_reference, policy_reference


@click.command("policy")
@click.option(
    "--config-keys",
    is_flag=True,
    help="Print the keys of a `servegate gate --config` file instead: each with the option that "
    "overrides it, its default and meaning (docs/config.md).",
)
def policy(config_keys: bool) -> None:
    """Print every verdict policy key with its default, unit and reason (Markdown)."""
    if config_keys:
        from servegate.cli.gate_cmd import config_flags

        click.echo(config_reference(config_flags()), nl=False)
        return
    click.echo(policy_reference(), nl=False)
