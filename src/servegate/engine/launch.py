"""Start the reference engine: llama-cpp-python's OpenAI server, optionally behind a fault proxy.

Child processes are started by `process.spawn` (each under a guard leading its own session and
process group), so no engine, nor anything it started, outlives its owner.

Determinism: llama-cpp-python keeps the previous request's KV cache and re-evaluates only the
tokens after the longest common prefix, so a chat sent twice in a row can flip greedy tokens
(measured: "Reply with exactly: OK" diverges after ~20 tokens on the 2nd send). A 1-token
completion of RESET_PROMPT first, whose first token differs from `<|im_start|>`, forces a full
prompt evaluation: outputs then matched on every repeat and across fresh servers.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType

from servegate.engine.errors import EngineMissingError, EngineStartError, UnknownNameError
from servegate.engine.faults import FAULTS, FaultOptions, options_argv
from servegate.engine.model import INSTALL_HINT as MODEL_INSTALL_HINT
from servegate.engine.model import shipped_model_path
from servegate.engine.process import free_port, log_tail, spawn, stop_group
from servegate.engine.variants import VARIANTS, variant_gguf

MODEL_ALIAS = "smollm2-135m-instruct"
RESET_PROMPT = "0"
CONTEXT_TOKENS = 4096


def llama_command(
    gguf: Path, port: int, extra_args: tuple[str, ...] = (), *, embeddings: bool = False
) -> list[str]:
    """argv of the llama-cpp-python OpenAI server on 127.0.0.1:`port` serving `gguf`; with
    `embeddings`, the embeddings-mode engine (mean-pooled vectors, see embedding_mode.py)."""
    if embeddings:
        return [
            sys.executable, "-m", "servegate.engine.llama_server",
            "--servegate-pooling", "mean",
            "--model", str(gguf), "--model_alias", MODEL_ALIAS,
            "--host", "127.0.0.1", "--port", str(port),
            "--embedding", "true", "--interrupt_requests", "false",
            "--n_ctx", str(CONTEXT_TOKENS),
            *extra_args,
        ]  # fmt: skip
    return [
        # llama_cpp.server's own main, with correct and fast logprobs (see logprob_fix.py).
        sys.executable, "-m", "servegate.engine.llama_server",
        "--model", str(gguf), "--model_alias", MODEL_ALIAS,
        "--host", "127.0.0.1", "--port", str(port),
        # chatml-function-calling: the one built-in format that serves both tools and plain chat.
        "--chat_format", "chatml-function-calling",
        "--embedding", "true", "--logits_all", "true",
        # By default a new request cuts the stream in progress short (`[DONE]` after a few
        # tokens, HTTP 200): concurrent requests would get empty answers. Queue them instead; a
        # client that disconnects still stops its own generation.
        "--interrupt_requests", "false",
        "--n_ctx", str(CONTEXT_TOKENS),
        *extra_args,
    ]  # fmt: skip


# How a llama.cpp engine's OpenMP threads wait at each step's barrier: asleep, not spinning.
# servegate serves baseline and candidate from one host at the same time, and llama.cpp
# processes a prompt on every core: two engines spinning at their barriers on 2 cores each
# wait for a thread the other has descheduled. Measured on 2 cores, a 2,212-token prompt on
# both engines at once took 43-47 s with libgomp's default and 25-26 s asleep (one engine
# alone: 14 s either way); the engines compute the same numbers, only their waits change
# (benchmarks/results/time-2026-12-07/two-engines/). A value already set here wins.
ENGINE_ENV = {"OMP_WAIT_POLICY": "PASSIVE"}


def engine_env() -> dict[str, str]:
    """The environment a llama.cpp engine is started with: this process's, with `ENGINE_ENV`
    where it sets nothing."""
    return {**ENGINE_ENV, **os.environ}


# The reference engine runs on llama-cpp-python, servegate's `engine` extra: a compiled package
# (a C++ toolchain and CMake build llama.cpp on install). The core install talks to servers that
# are already running and does without it.
ENGINE_INSTALL_HINT = (
    "pip install 'servegate[engine]' (builds llama.cpp: needs a C++ compiler and CMake; in a "
    "checkout, bash scripts/setup.sh builds it with the flags these CPUs need)"
)


def require_llama_cpp() -> None:
    """EngineMissingError with the install command unless llama-cpp-python is importable here
    (the engine process is this interpreter: a missing module would only show as its crash)."""
    if importlib.util.find_spec("llama_cpp") is None:
        raise EngineMissingError(
            f"the reference engine needs llama-cpp-python, which is not installed: "
            f"{ENGINE_INSTALL_HINT}; and its model: {MODEL_INSTALL_HINT}"
        )


# The stock server: the current llama-cpp-python release as a user installs it (built with the
# AMX-safe flags only), unpatched, with its own defaults — `interrupt_requests` included, so a
# new request cuts the stream in flight. `bash scripts/setup.sh stock` makes its venv.
STOCK_VENV = ".venv-stock"


def stock_python() -> Path:
    """The interpreter of the stock llama-cpp-python server: $SERVEGATE_STOCK_PYTHON, else
    `.venv-stock/bin/python` beside the venv servegate runs in."""
    named = os.environ.get("SERVEGATE_STOCK_PYTHON")
    if named:
        return Path(named)
    return Path(sys.prefix).parent / STOCK_VENV / "bin" / "python"


def stock_command(gguf: Path, port: int, extra_args: tuple[str, ...] = ()) -> list[str]:
    """argv of the stock llama-cpp-python OpenAI server: the reference engine's model and
    flags, without its logprob fix and without `--interrupt_requests false`."""
    return [
        str(stock_python()), "-m", "llama_cpp.server",
        "--model", str(gguf), "--model_alias", MODEL_ALIAS,
        "--host", "127.0.0.1", "--port", str(port),
        "--chat_format", "chatml-function-calling",
        # Without logits_all the stock server refuses every request for logprobs.
        "--logits_all", "true",
        "--n_ctx", str(CONTEXT_TOKENS),
        *extra_args,
    ]  # fmt: skip


def answers_completion(base_url: str, timeout_s: float = 30.0) -> bool:
    """True when a real 1-token completion succeeds (a green /v1/models proves nothing)."""
    body = json.dumps({"prompt": RESET_PROMPT, "max_tokens": 1, "temperature": 0}).encode()
    request = urllib.request.Request(
        f"{base_url}/completions", data=body, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            payload = json.loads(response.read())
    except (OSError, ValueError):
        return False
    return bool(payload.get("choices"))


class RunningEngine:
    """A started engine: `base_url` ends in /v1; `pid` is the process that owns the public port."""

    def __init__(
        self,
        *,
        variant: str,
        fault: str | None,
        port: int,
        processes: list[subprocess.Popen[bytes]],
        log_path: Path,
    ) -> None:
        self.variant = variant
        self.fault = fault
        self.model = MODEL_ALIAS
        self.base_url = f"http://127.0.0.1:{port}/v1"
        self.log_path = log_path
        self.startup_s = 0.0
        self.stock = False  # the stock llama-cpp-python server, not the reference engine
        self._processes = processes  # public-port process last

    @property
    def pid(self) -> int:
        return self._processes[-1].pid

    @property
    def pids(self) -> tuple[int, ...]:
        return tuple(process.pid for process in self._processes)

    def alive(self) -> bool:
        """True while every child process is still running."""
        return all(process.poll() is None for process in self._processes)

    def stop(self, grace_s: float = 10.0) -> None:
        """SIGTERM the children (proxy first), SIGKILL after `grace_s`; safe to call twice."""
        for process in reversed(self._processes):
            stop_group(process, grace_s)

    def __enter__(self) -> RunningEngine:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def start_engine(
    variant: str = "clean",
    *,
    port: int | None = None,
    fault: str | None = None,
    cache_dir: Path | None = None,
    log_path: Path | None = None,
    ready_timeout_s: float = 120.0,
    fault_options: FaultOptions | None = None,
    embeddings: bool = False,
    stock: bool = False,
) -> RunningEngine:
    """Serve `variant` (behind `fault`, if any) on 127.0.0.1 and return once it really answers;
    with `embeddings`, in embeddings mode (one mean-pooled vector per `/v1/embeddings` input);
    with `stock`, on the stock llama-cpp-python server instead of the reference engine."""
    if variant not in VARIANTS:
        raise UnknownNameError(f"unknown variant {variant!r}; known: {', '.join(VARIANTS)}")
    if fault is not None and fault not in FAULTS:
        raise UnknownNameError(f"unknown fault {fault!r}; known: {', '.join(FAULTS)}")
    if not stock:
        require_llama_cpp()
    chosen = VARIANTS[variant]
    gguf = variant_gguf(chosen, shipped_model_path(), cache_dir)
    if log_path is None:
        handle, name = tempfile.mkstemp(prefix=f"servegate-engine-{variant}-", suffix=".log")
        os.close(handle)
        log_path = Path(name)
    public_port = port or free_port()
    llama_port = free_port() if fault else public_port
    began = time.perf_counter()
    if stock and not stock_python().exists():
        raise EngineStartError(
            f"the stock llama-cpp-python server is not installed ({stock_python()} is missing): "
            "bash scripts/setup.sh stock"
        )
    argv = (
        stock_command(gguf, llama_port, chosen.server_args)
        if stock
        else llama_command(gguf, llama_port, chosen.server_args, embeddings=embeddings)
    )
    processes = [spawn(argv, log_path, env=engine_env())]
    if fault:
        upstream = f"http://127.0.0.1:{llama_port}"
        proxy_argv = [
            *(sys.executable, "-m", "servegate.engine.faults", fault),
            *("--port", str(public_port), "--upstream", upstream),
            *options_argv(fault_options or FaultOptions()),
        ]
        processes.append(spawn(proxy_argv, log_path))
    engine = RunningEngine(
        variant=variant, fault=fault, port=public_port, processes=processes, log_path=log_path
    )
    engine.stock = stock
    try:
        _wait_ready(engine, began + ready_timeout_s)
    except BaseException:
        engine.stop()
        raise
    engine.startup_s = time.perf_counter() - began
    return engine


def _wait_ready(engine: RunningEngine, deadline: float) -> None:
    while True:
        if not engine.alive():
            raise EngineStartError(
                f"engine {engine.variant} exited during start-up; log {engine.log_path}:\n"
                + log_tail(engine.log_path)
            )
        if answers_completion(engine.base_url, timeout_s=10.0):
            return
        if time.perf_counter() > deadline:
            raise EngineStartError(
                f"engine {engine.variant} did not answer a completion in time; "
                f"log {engine.log_path}:\n" + log_tail(engine.log_path)
            )
        time.sleep(0.25)
