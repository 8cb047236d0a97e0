"""`python -m servegate.engine.llama_server ARGS`: llama-cpp-python's server, logprobs fixed.

Takes the arguments of `python -m llama_cpp.server`; installs logprob_fix on `llama_cpp.Llama`
in this process only (the installed package is unchanged), then runs the server's own main().
With `--servegate-pooling NAME` first (embeddings mode), embedding_mode is installed too and the
flag is taken off the arguments the server sees.
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

    # Looked up by name: llama_cpp.server's main() is untyped, and optional for servegate.
    serve: Callable[[], None] = importlib.import_module("llama_cpp.server.__main__").main
    install(llama_cpp.Llama)
    if POOLING_FLAG in sys.argv[1:-1]:
        at = sys.argv.index(POOLING_FLAG)
        embedding_mode.install(llama_cpp.Llama, sys.argv[at + 1])
        del sys.argv[at : at + 2]
    serve()


if __name__ == "__main__":
    main()
