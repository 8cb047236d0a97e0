"""`servegate engine`: serve the embedded reference engine, list its variants and faults."""

from __future__ import annotations

import signal
import time
from pathlib import Path
from types import FrameType
from typing import Any

import click

from servegate.cli.console import fail

_POLL_S = 0.5


@click.group()
def engine() -> None:
    """The embedded reference engine: llama.cpp serving the shipped SmolLM2-135M model."""


@engine.command()
@click.option(
    "--variant", default="clean", show_default=True, help="See `servegate engine variants`."
)
@click.option("--fault", default=None, help="A fault layer in front of the engine, e.g. hang-long.")
@click.option("--port", type=click.IntRange(1, 65535), default=None, help="Default: a free port.")
@click.option(
    "--cache-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where rewritten model variants are kept. Default: ~/.cache/servegate/engine.",
)
@click.option(
    "--log",
    "log_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Engine log file. Default: a temporary file, named on start.",
)
@click.option(
    "--threshold-chars",
    type=click.IntRange(0),
    default=2000,
    show_default=True,
    help="hang-long: prompts longer than this many characters never get an answer.",
)
@click.option(
    "--delay-ms",
    type=click.IntRange(0),
    default=None,
    help="slow: milliseconds added before each request and between streamed events [200].",
)
@click.option(
    "--drop-fragment",
    type=click.IntRange(1),
    default=None,
    help="stream-tool-args: which streamed arguments fragment (1-based) goes missing [2].",
)
@click.option(
    "--reasoning-text",
    default=None,
    help="reasoning-leak: text put before chat answers [<think>…</think> and a newline].",
)
@click.option(
    "--system-text",
    default=None,
    help="template-drift: text added to the system prompt [SmolLM2's default system prompt].",
)
@click.option(
    "--truncate-fraction",
    type=click.FloatRange(0, 1, min_open=True),
    default=None,
    help="json-truncated: share of a JSON answer cut off its end [0.3].",
)
@click.option(
    "--runaway-max-tokens",
    type=click.IntRange(1),
    default=None,
    help="eos-ignored: the length limit for requests that set no max_tokens [256].",
)
@click.option(
    "--perturb-scale",
    type=click.FloatRange(0, min_open=True),
    default=None,
    help="embed-perturb: noise added to each embedding, as a fraction of its norm [0.1].",
)
@click.option(
    "--default-temperature",
    type=click.FloatRange(0, min_open=True),
    default=None,
    help="temperature-default: what replaces a sampled request's temperature [0.7].",
)
@click.option(
    "--nucleus-factor",
    type=click.FloatRange(0, 1, min_open=True, max_open=True),
    default=None,
    help="nucleus-narrowed: what top_p below 1 is multiplied by [0.5].",
)
@click.option(
    "--embeddings",
    is_flag=True,
    default=False,
    help="Embeddings mode: /v1/embeddings answers one mean-pooled vector per input.",
)
@click.option(
    "--stock",
    is_flag=True,
    default=False,
    help="Serve on the stock llama-cpp-python server (the current release, unpatched, with its "
    "own defaults: echo logprobs one token late, a new request interrupts the stream in "
    "flight) from .venv-stock (bash scripts/setup.sh stock): a server servegate did not build.",
)
def serve(
    variant: str,
    fault: str | None,
    port: int | None,
    cache_dir: Path | None,
    log_path: Path | None,
    threshold_chars: int,
    embeddings: bool,
    stock: bool,
    **fault_options: int | float | str | None,
) -> None:
    """Serve VARIANT on 127.0.0.1 in the foreground until Ctrl-C or SIGTERM."""
    from servegate.engine import EngineError, FaultOptions, start_engine

    # Options left unset keep FaultOptions' own defaults.
    given: dict[str, Any] = {k: v for k, v in fault_options.items() if v is not None}
    options = FaultOptions(threshold_chars=threshold_chars, **given)
    try:
        running = start_engine(
            variant,
            port=port,
            fault=fault,
            cache_dir=cache_dir,
            log_path=log_path,
            fault_options=options,
            embeddings=embeddings,
            stock=stock,
        )
    except EngineError as exc:
        fail(str(exc), exc.exit_code)
    # SIGTERM takes the same orderly path as Ctrl-C: stop the children, then exit.
    previous = signal.signal(signal.SIGTERM, _raise_keyboard_interrupt)
    behind = f" behind fault {fault}" if fault else ""
    mode = " in embeddings mode" if embeddings else ""
    mode += " on the stock llama-cpp-python server" if stock else ""
    click.echo(
        f"servegate engine: serving {variant}{mode}{behind} on {running.base_url} "
        f"(model {running.model}, pid {running.pid}, ready in {running.startup_s:.1f} s, "
        f"log {running.log_path})"
    )
    try:
        while running.alive():
            time.sleep(_POLL_S)
    except KeyboardInterrupt:
        click.echo("servegate engine: stopping", err=True)
        running.stop()
        return
    finally:
        running.stop()
        signal.signal(signal.SIGTERM, previous)
    fail(f"the engine exited unexpectedly; see {running.log_path}", 3)


def _raise_keyboard_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


@engine.command()
def variants() -> None:
    """List the model variants and faults with one-line descriptions."""
    from servegate.engine import BENIGN_VARIANT, FAULTS, VARIANTS

    click.echo("variants (--variant):")
    for name, variant in VARIANTS.items():
        marker = " [demo's benign candidate]" if name == BENIGN_VARIANT else ""
        click.echo(f"  {name:<17} {variant.description}{marker}")
    click.echo("faults (--fault):")
    for name, spec in FAULTS.items():
        click.echo(f"  {name:<17} {spec.description}")


@engine.command()
@click.option(
    "--to",
    "target",
    type=click.Choice(["transformers"]),
    required=True,
    help="The engine whose model format to write.",
)
@click.option(
    "--gguf",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    default=None,
    help="Default: the shipped SmolLM2 GGUF.",
)
@click.option(
    "--cache-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Default: $XDG_CACHE_HOME/servegate/transformers (~/.cache/…).",
)
@click.option(
    "--python",
    "python",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="The interpreter with torch and transformers. Default: .venv-transformers/bin/python "
    "when it exists (bash scripts/setup.sh transformers), else this one.",
)
def convert(target: str, gguf: Path | None, cache_dir: Path | None, python: Path | None) -> None:
    """Convert the GGUF once for `transformers serve`; print the model folder (cached)."""
    import subprocess
    import sys

    if python is None:
        local = Path(".venv-transformers/bin/python")
        python = local if local.exists() else Path(sys.executable)
    argv = [str(python), "-m", "servegate.engine.transformers_model", "convert"]
    if gguf is not None:
        argv += ["--gguf", str(gguf.resolve())]
    if cache_dir is not None:
        argv += ["--cache-dir", str(cache_dir.resolve())]
    try:
        done = subprocess.run(argv, check=False)
    except OSError as exc:
        fail(f"--python {python}: {exc.strerror}", 2)
    if done.returncode != 0:
        sys.exit(done.returncode)
