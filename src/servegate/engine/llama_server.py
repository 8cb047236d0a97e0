"""`python -m servegate.engine.llama_server ARGS`: llama-cpp-python's server, logprobs fixed.

Takes the arguments of `python -m llama_cpp.server`; installs logprob_fix on `llama_cpp.Llama`
in this process only (the installed package is unchanged), then runs the server's own main().
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from servegate.engine.logprob_fix import install


def main() -> None:
    """Install the logprob fix, then serve exactly as `python -m llama_cpp.server` would."""
    import llama_cpp

    # Looked up by name: llama_cpp.server's main() is untyped, and optional for servegate.
    serve: Callable[[], None] = importlib.import_module("llama_cpp.server.__main__").main
    install(llama_cpp.Llama)
    serve()


if __name__ == "__main__":
    main()
