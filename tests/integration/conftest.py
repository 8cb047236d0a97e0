"""Reference engines shared by the integration tests, started once per session on loopback."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from servegate.engine import RunningEngine

# Short enough for fast tests, long enough that a prompt of a few sentences passes.
HANG_THRESHOLD_CHARS = 500


def require_engine() -> None:
    """Fail when the reference engine is missing under the project's test command (scripts/test.sh
    sets SERVEGATE_REQUIRE_ENGINE, and setup.sh dev installs the engine): a missing engine there
    is a broken set-up, never a skip. A bare `pytest` elsewhere skips, saying why."""
    if importlib.util.find_spec("llama_cpp") is not None:
        return
    if os.environ.get("SERVEGATE_REQUIRE_ENGINE") or os.environ.get("CI"):
        pytest.fail("reference engine not installed (bash scripts/setup.sh dev)")
    pytest.skip("reference engine not installed (bash scripts/setup.sh engine)")


def _engine_or_skip(variant: str, fault: str | None = None, **options: Any) -> RunningEngine:
    require_engine()
    from servegate.engine import FaultOptions, start_engine

    return start_engine(variant, fault=fault, fault_options=FaultOptions(**options))


@pytest.fixture(scope="session")
def engine_factory() -> Callable[..., RunningEngine]:
    """`engine_factory(variant, fault=None, **options)`: start a reference engine (a context
    manager); fails under the test command when the engine is not installed."""
    return _engine_or_skip


@pytest.fixture(scope="session")
def clean_engine() -> Iterator[RunningEngine]:
    """The shipped model with default flags."""
    with _engine_or_skip("clean") as engine:
        yield engine


@pytest.fixture(scope="session")
def mixed_dtype_engine() -> Iterator[RunningEngine]:
    """attn_norm F32 weights read back as bf16: answers runs of commas."""
    with _engine_or_skip("mixed-dtype") as engine:
        yield engine


@pytest.fixture(scope="session")
def hang_long_engine() -> Iterator[RunningEngine]:
    """The clean model behind the hang-long fault (threshold HANG_THRESHOLD_CHARS)."""
    with _engine_or_skip("clean", "hang-long", threshold_chars=HANG_THRESHOLD_CHARS) as engine:
        yield engine


@pytest.fixture(scope="session")
def benign_engine() -> Iterator[RunningEngine]:
    """The benign config change (same weights, mmap off): same answers, same speed."""
    from servegate.engine import BENIGN_VARIANT

    with _engine_or_skip(BENIGN_VARIANT) as engine:
        yield engine


# The fault layer in front of the clean model, one engine per fault, each for one test module.
SLOW_DELAY_MS = 300


@pytest.fixture(scope="module")
def stream_tool_args_engine() -> Iterator[RunningEngine]:
    """Streamed tool-call arguments miss their second fragment."""
    with _engine_or_skip("clean", "stream-tool-args") as engine:
        yield engine


@pytest.fixture(scope="module")
def reasoning_leak_engine() -> Iterator[RunningEngine]:
    """Chat content starts with <think>…</think> reasoning."""
    with _engine_or_skip("clean", "reasoning-leak") as engine:
        yield engine


@pytest.fixture(scope="module")
def template_drift_engine() -> Iterator[RunningEngine]:
    """Chats reach the model with SmolLM2's default system prompt added."""
    with _engine_or_skip("clean", "template-drift") as engine:
        yield engine


@pytest.fixture(scope="module")
def json_truncated_engine() -> Iterator[RunningEngine]:
    """JSON-mode answers lose their last 30 % (and the closing brace)."""
    with _engine_or_skip("clean", "json-truncated") as engine:
        yield engine


@pytest.fixture(scope="module")
def eos_ignored_engine() -> Iterator[RunningEngine]:
    """Generation runs past EOS to max_tokens."""
    with _engine_or_skip("clean", "eos-ignored") as engine:
        yield engine


@pytest.fixture(scope="module")
def slow_engine() -> Iterator[RunningEngine]:
    """SLOW_DELAY_MS before every request and between streamed events."""
    with _engine_or_skip("clean", "slow", delay_ms=SLOW_DELAY_MS) as engine:
        yield engine


GateRun = tuple[subprocess.CompletedProcess[str], dict[str, Any]]


def _answers(url: str) -> bool:
    from servegate.engine import answers_completion

    return answers_completion(url, timeout_s=5)


def wait_ready(
    process: subprocess.Popen[bytes],
    log: Path,
    ready: Callable[[], bool],
    *,
    timeout_s: float,
    poll_s: float,
) -> None:
    """Poll `ready()` until it holds; fail with the log's tail if the process exits or
    `timeout_s` passes first."""
    from servegate.engine.process import log_tail

    deadline = time.monotonic() + timeout_s
    while not ready():
        assert process.poll() is None, log_tail(log)
        assert time.monotonic() < deadline, log_tail(log)
        time.sleep(poll_s)


@contextmanager
def fault_in_front(
    fault: Sequence[str],
    upstream_url: str,
    log: Path,
    *,
    ready: Callable[[str], bool] = _answers,
    ready_s: float = 30.0,
) -> Iterator[str]:
    """`python -m servegate.engine.faults FAULT [OPTIONS]` (`fault`) in front of `upstream_url`
    (…/v1), started as `servegate engine serve --fault` starts it and stopped by its own process
    id; yields its …/v1 URL once `ready(url)` (default: a real 1-token completion)."""
    from servegate.engine.process import free_port, spawn, stop_group

    port = free_port()
    argv = [sys.executable, "-m", "servegate.engine.faults", *fault,
            "--port", str(port), "--upstream", upstream_url.removesuffix("/v1")]  # fmt: skip
    proxy = spawn(argv, log)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        wait_ready(proxy, log, lambda: ready(url), timeout_s=ready_s, poll_s=0.1)
        yield url
    finally:
        stop_group(proxy, 5.0)
    assert proxy.poll() is not None


def run_servegate(*args: str, timeout_s: float = 300) -> subprocess.CompletedProcess[str]:
    """The real command line, in a child process: exit codes and stderr as a user sees them."""
    return subprocess.run(
        [sys.executable, "-m", "servegate", *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )


@pytest.fixture
def gate_cli(tmp_path: Path) -> Callable[..., GateRun]:
    """Run `servegate gate BASELINE CANDIDATE *extra` and return the process and its JSON report."""

    def run(baseline: RunningEngine, candidate: RunningEngine, *extra: str) -> GateRun:
        out = tmp_path / "report.json"
        proc = run_servegate(
            "gate", "--baseline", baseline.base_url, "--candidate", candidate.base_url,
            "--json", str(out), "--db", str(tmp_path / "runs.db"), "--quiet", *extra,
        )  # fmt: skip
        assert "Traceback" not in proc.stderr, proc.stderr
        assert out.exists(), f"exit {proc.returncode}, no report: {proc.stderr[-2000:]}"
        return proc, json.loads(out.read_text())

    return run


def require_stock() -> None:
    """The stock llama-cpp-python server (bash scripts/setup.sh stock; dev set-up includes it):
    missing under the project's test command is a broken set-up, never a skip."""
    require_engine()
    from servegate.engine.launch import stock_python

    if stock_python().exists():
        return
    if os.environ.get("SERVEGATE_REQUIRE_ENGINE") or os.environ.get("CI"):
        pytest.fail(f"stock llama-cpp-python server not installed ({stock_python()}): "
                    "bash scripts/setup.sh stock")  # fmt: skip
    pytest.skip("stock llama-cpp-python server not installed (bash scripts/setup.sh stock)")


def _stock_or_skip(variant: str, fault: str | None = None, **options: Any) -> RunningEngine:
    require_stock()
    from servegate.engine import FaultOptions, start_engine

    return start_engine(variant, fault=fault, fault_options=FaultOptions(**options), stock=True)


@pytest.fixture(scope="session")
def stock_factory() -> Callable[..., RunningEngine]:
    """`stock_factory(variant, fault=None, **options)`: the stock llama-cpp-python server (the
    current release, unpatched, its own defaults) serving `variant` — a server servegate did
    not build."""
    return _stock_or_skip


@pytest.fixture(scope="module")
def stock_engine() -> Iterator[RunningEngine]:
    with _stock_or_skip("clean") as engine:
        yield engine
