"""`servegate policy`: print the policy reference (every key, its default, unit and reason)."""

from __future__ import annotations

import click

from servegate.config.reference import policy_reference


@click.command("policy")
def policy() -> None:
    """Print every verdict policy key with its default, unit and reason (Markdown)."""
    click.echo(policy_reference(), nl=False)
