"""Prove the installed llama-cpp-python can run the shipped model (run by scripts/setup.sh).

A natively built wheel segfaults in ggml_backend_amx_mul_mat on the first real prompt on these
CPUs, and pip may hand back such a wheel from its cache; a 40-token chat completion right after
install turns that into a loud set-up failure instead of a mystery later.
"""

from __future__ import annotations

import subprocess
import sys

_CHILD = r"""
import sys
from llama_cpp import Llama
llm = Llama(model_path=sys.argv[1], n_ctx=512, n_threads=2, verbose=False)
prompt = "Please answer in one short sentence. " * 5 + "What colour is the sky on a clear day?"
out = llm.create_chat_completion(
    messages=[{"role": "user", "content": prompt}], max_tokens=8, temperature=0
)
print(repr(out["choices"][0]["message"]["content"]))
"""


def main(argv: list[str] | None = None) -> int:
    """Check the llama-cpp-python of this interpreter, or of the one named as the argument (the
    stock server's venv, `scripts/setup.sh stock`)."""
    from servegate.engine.model import shipped_model_path

    args = sys.argv[1:] if argv is None else argv
    python = args[0] if args else sys.executable
    path = shipped_model_path()
    # A crash must not take this process with it: run the check in a child and read its status.
    proc = subprocess.run(
        [python, "-c", _CHILD, str(path)], capture_output=True, text=True, timeout=300
    )
    if proc.returncode != 0:
        sys.stderr.write(
            f"servegate: llama-cpp-python cannot run the model (exit {proc.returncode}).\n"
            "A wheel built with native CPU flags crashes here; rebuild it with scripts/setup.sh "
            "after removing ~/.cache/servegate/wheels.\n" + proc.stderr[-2000:]
        )
        return 1
    print(f"engine self-check ({python}): SmolLM2 answered {proc.stdout.strip()}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
