"""`python -m servegate.engine.llama_server ARGS`: llama-cpp-python's server, logprobs fixed.

Takes the arguments of `python -m llama_cpp.server`; installs logprob_fix on `llama_cpp.Llama`
in this process only (the installed package is unchanged), then runs the server's own main().
With `--servegate-pooling NAME` first (embeddings mode), embedding_mode is installed too and the
flag is taken off the arguments the server sees.
`--reference --port N [ARGS]` stands for the reference engine's own command line (the shipped
SmolLM2 GGUF and the flags `servegate engine serve` uses), so a config file needs no model path.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable

from servegate.engine import embedding_mode
from servegate.engine.logprob_fix import install

POOLING_FLAG = "--servegate-pooling"


def main() -> None:
    """Install the logprob fix, then serve exactly as `python -m llama_cpp.server` would."""
    import llama_cpp

    if sys.argv[1:2] == ["--reference"]:
        sys.argv[1:] = _reference_argv(sys.argv[2:])

    # Looked up by name: llama_cpp.server's main() is untyped, and optional for servegate.
    serve: Callable[[], None] = importlib.import_module("llama_cpp.server.__main__").main
    install(llama_cpp.Llama)
    if POOLING_FLAG in sys.argv[1:-1]:
        at = sys.argv.index(POOLING_FLAG)
        embedding_mode.install(llama_cpp.Llama, sys.argv[at + 1])
        del sys.argv[at : at + 2]
    serve()


def _reference_argv(rest: list[str]) -> list[str]:
    from servegate.engine.launch import llama_command
    from servegate.engine.model import shipped_model_path

    port = 8000
    if "--port" in rest and rest.index("--port") + 1 < len(rest):
        at = rest.index("--port")
        port = int(rest[at + 1])
        rest = rest[:at] + rest[at + 2 :]
    return llama_command(shipped_model_path(), port, tuple(rest))[3:]


if __name__ == "__main__":
    main()
