"""`servegate probe URL`: what a server really supports, found by trying each capability."""

from __future__ import annotations

import asyncio
import json

import click
from rich.table import Table
from rich.text import Text

from servegate.cli.console import fail, stdout
from servegate.endpoints.errors import EndpointError
from servegate.endpoints.http import OpenAIEndpoint
from servegate.endpoints.urls import display_url, normalise_url
from servegate.gates.capabilities import Capability, discover
from servegate.orchestration.runner import PreflightError, preflight
from servegate.reports.plain import plain
from servegate.verdict.rules import EXIT_USAGE


async def _probe(
    url: str, model: str | None, api_key_env: str | None, deadline_s: float
) -> tuple[tuple[str, ...], str | None, dict[str, Capability]]:
    ep = OpenAIEndpoint("endpoint", normalise_url(url), api_key_env=api_key_env)
    try:
        pre = await preflight(ep, deadline_s)
        chosen = model or (pre.models[0] if pre.models else None)
        return pre.models, chosen, await discover(ep, chosen, deadline_s=deadline_s)
    finally:
        await ep.aclose()


def _mark(supported: bool | None) -> Text:
    if supported is None:
        return Text("unknown", "yellow")
    return Text("yes", "green") if supported else Text("no", "red")


@click.command("probe")
@click.argument("url")
@click.option("--model", default=None, help="Model to send (default: the first listed).")
@click.option("--api-key-env", default=None, metavar="VAR", help="Variable holding the API key.")
@click.option(
    "--deadline-s", default=20.0, show_default=True, type=float, help="Deadline per probe request."
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON for machines.")
def probe(
    url: str, model: str | None, api_key_env: str | None, deadline_s: float, as_json: bool
) -> None:
    """Discover which OpenAI API features the server at URL really supports.

    Each capability is tried with a real request: logprobs (and how many top logprobs come back),
    prompt logprobs with echo, usage in streams, tools, JSON modes, seed, embeddings, vLLM-style
    /score and /rerank, /version and /metrics. `unknown` means the probe itself could not run
    (timeout, 5xx).
    """
    if not deadline_s > 0:  # checked before the server is asked: a zero deadline is no probe
        fail(f"--deadline-s: {deadline_s:g} must be > 0 (seconds per probe request)", EXIT_USAGE)
    try:
        models, chosen, caps = asyncio.run(_probe(url, model, api_key_env, deadline_s))
    except (PreflightError, EndpointError) as exc:
        fail(str(exc), exc.exit_code)
    if as_json:
        out = {
            "url": display_url(normalise_url(url)),
            "models": list(models),
            "model": chosen,
            "capabilities": {
                k: {"supported": c.supported, "detail": c.detail} for k, c in caps.items()
            },
        }
        click.echo(json.dumps(out, indent=2))
        return
    # A model id and the server's error text are the server's words: shown, never interpreted
    # (Rich markup stays literal, control characters are shown as escapes).
    title = Text(plain(f"{display_url(normalise_url(url))}  model {chosen or '-'}", one_line=True))
    table = Table(title=title, title_justify="left")
    table.add_column("capability")
    table.add_column("supported")
    table.add_column("observed", overflow="fold")
    for name, cap in caps.items():
        table.add_row(Text(plain(name)), _mark(cap.supported), Text(plain(cap.detail)))
    stdout.print(table)
