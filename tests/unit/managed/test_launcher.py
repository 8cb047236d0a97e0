"""Managed launches against stand-in engines: every start-up fault is a result, never a stray
process. Process ids are checked in /proc, so a process left behind fails the test."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from servegate.config.models import EndpointConfig
from servegate.managed.launch_evidence import LaunchOutcome
from servegate.managed.launcher import launch
from servegate.managed.logscan import load_catalogue

FAKE = str(Path(__file__).with_name("fake_engine.py"))
HOLD = str(Path(__file__).with_name("hold_engines.py"))
SRC = str(Path(__file__).resolve().parents[3] / "src")


def alive(pid: int) -> bool:
    """The process exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2] != "Z"


def wait_gone(pid: int, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not alive(pid):
            return True
        time.sleep(0.05)
    return False


def _worker_pid(log: Path) -> int:
    line = next(x for x in log.read_text().splitlines() if x.startswith("worker pid"))
    return int(line.split()[-1])


def _cfg(*command: str, ready_timeout_s: float = 20.0, url: str | None = None) -> EndpointConfig:
    return EndpointConfig.model_validate(
        {"url": url, "launch": {"command": list(command), "ready_timeout_s": ready_timeout_s}}
    )


async def test_an_engine_that_serves_is_ready_with_load_and_ready_times(tmp_path: Path) -> None:
    managed = await launch("candidate", _cfg(sys.executable, FAKE, "serve", "{port}"),
                           tmp_path, load_catalogue())  # fmt: skip
    try:
        ev = managed.evidence
        assert ev.outcome is LaunchOutcome.READY, ev.message
        assert ev.port_open_s is not None
        assert ev.ready_s is not None
        assert 0.3 <= ev.port_open_s <= ev.ready_s < 20  # the fake sleeps 0.3 s before serving
        assert ev.peak_rss_mb is not None
        assert ev.peak_rss_mb > 1
        assert ev.gpu_memory_mb is None
        assert ev.gpu_note
        assert [h.kind for h in ev.hits] == ["fallback"]
        assert "falling back to the slow path" in ev.hits[0].line
        assert managed.url.startswith("http://127.0.0.1:")
        assert "{port}" not in managed.url
        worker = _worker_pid(Path(ev.log_path))
        assert managed.pid is not None
        assert alive(managed.pid)
        assert alive(worker)
    finally:
        await managed.stop()
    assert not alive(managed.pid)
    assert wait_gone(worker)


async def test_stopping_an_engine_that_ignores_sigterm_never_blocks_the_event_loop(
    tmp_path: Path,
) -> None:
    """A stop waits up to `stop_timeout_s` for SIGTERM to work, then SIGKILLs the group; the
    event loop keeps serving meanwhile (the proxy, the heartbeat and the other side share it)."""
    cfg = EndpointConfig.model_validate(
        {"launch": {"command": [sys.executable, FAKE, "stubborn", "{port}"],
                    "ready_timeout_s": 20, "stop_timeout_s": 2}}
    )  # fmt: skip
    managed = await launch("candidate", cfg, tmp_path, ())
    assert managed.evidence.outcome is LaunchOutcome.READY, managed.evidence.message
    ticks: list[float] = []

    async def tick() -> None:
        while True:
            ticks.append(time.monotonic())
            await asyncio.sleep(0.02)

    ticker = asyncio.create_task(tick())
    began = time.monotonic()
    await managed.stop()
    ended = time.monotonic()
    took = ended - began
    ticker.cancel()
    gaps = [b - a for a, b in itertools.pairwise([began, *ticks, ended])]
    assert took >= 1.9  # it did wait for SIGTERM before the SIGKILL
    assert max(gaps) < 0.5, f"the loop stalled {max(gaps):.2f} s"
    assert managed.pid is not None
    assert wait_gone(managed.pid)
    assert wait_gone(_worker_pid(Path(managed.evidence.log_path)))


async def test_a_command_that_is_not_found_starts_nothing(tmp_path: Path) -> None:
    managed = await launch("candidate", _cfg("no-such-engine-xyz", "--port", "{port}"),
                           tmp_path, ())  # fmt: skip
    ev = managed.evidence
    assert ev.outcome is LaunchOutcome.NOT_FOUND
    assert ev.message == "cannot execute 'no-such-engine-xyz': No such file or directory"
    assert managed.pid is None


async def test_an_engine_that_exits_names_the_missing_module(tmp_path: Path) -> None:
    managed = await launch("candidate", _cfg(sys.executable, FAKE, "exit", "{port}"),
                           tmp_path, load_catalogue())  # fmt: skip
    ev = managed.evidence
    assert ev.outcome is LaunchOutcome.EXITED
    assert ev.exit_code == 1
    assert "No module named 'sg_missing_optional_codec'" in ev.log_tail
    assert [h.module for h in ev.hits if h.kind == "optional-dependency"] == [
        "sg_missing_optional_codec"
    ]
    assert ev.pid is not None
    assert not alive(ev.pid)


async def test_a_silent_engine_that_never_opens_its_port_times_out_and_is_stopped(
    tmp_path: Path,
) -> None:
    cfg = _cfg(sys.executable, FAKE, "silent", "{port}", ready_timeout_s=1.5)
    started = time.monotonic()
    managed = await launch("candidate", cfg, tmp_path, load_catalogue())
    ev = managed.evidence
    assert ev.outcome is LaunchOutcome.TIMEOUT
    assert "did not answer a completion within 1.5 s and never opened port" in ev.message
    assert ev.message.endswith("it printed nothing")
    assert ev.port_open_s is None
    assert time.monotonic() - started < 15
    assert ev.pid is not None
    assert not alive(ev.pid)


@pytest.fixture
def taken_port() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


async def test_a_port_already_taken_is_refused_before_starting(
    tmp_path: Path, taken_port: int
) -> None:
    cfg = _cfg(sys.executable, FAKE, "serve", str(taken_port),
               url=f"http://127.0.0.1:{taken_port}/v1")  # fmt: skip
    managed = await launch("candidate", cfg, tmp_path, ())
    assert managed.evidence.outcome is LaunchOutcome.PORT_TAKEN
    assert f"port {taken_port} on 127.0.0.1 already accepts connections" in managed.evidence.message
    assert managed.pid is None


def _hold(tmp_path: Path) -> tuple[subprocess.Popen[str], dict[str, int]]:
    engines = {side: {"launch": {"command": [sys.executable, FAKE, "serve", "{port}"]}}
               for side in ("baseline", "candidate")}  # fmt: skip
    env = {**os.environ, "PYTHONPATH": f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    holder = subprocess.Popen(
        [sys.executable, HOLD, json.dumps(engines), str(tmp_path)],
        stdout=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    assert holder.stdout is not None
    pids: dict[str, int] = {}
    for _ in range(2):
        name, pid, outcome = holder.stdout.readline().split()
        assert outcome == "ready"
        pids[name] = int(pid)
    pids.update({f"{side}-worker": _worker_pid(tmp_path / f"{side}.log") for side in engines})
    assert all(alive(pid) for pid in pids.values())
    return holder, pids


@pytest.mark.slow
def test_ctrl_c_stops_every_launched_engine(tmp_path: Path) -> None:
    holder, pids = _hold(tmp_path)
    with holder:  # closes its stdout
        holder.send_signal(signal.SIGINT)
        holder.wait(timeout=30)
    assert [name for name, pid in pids.items() if not wait_gone(pid)] == []


@pytest.mark.slow
def test_the_engines_and_their_workers_die_with_servegate_even_when_it_is_killed(
    tmp_path: Path,
) -> None:
    """FAULTS 65: servegate SIGKILLed (no finally runs) while two engines run, each with a worker
    child that ignores its parent's death (as a multi-process engine's workers do when their
    leader is killed before it can stop them): no engine process and no worker survives."""
    holder, pids = _hold(tmp_path)
    with holder:
        holder.kill()
        holder.wait(timeout=30)
    survivors = [name for name, pid in pids.items() if not wait_gone(pid, 20)]
    for pid in pids.values():  # never leave one behind for the next test, whatever happened
        if alive(pid):
            os.kill(pid, signal.SIGKILL)
    assert survivors == []


SHELL_PW = "pw-shell-canary-3b91e2"
SHELL_KEY = "sk-shell-canary-7c04d5"
ENV_KEY = "env-key-canary-90ab1f"


async def test_a_failed_shell_launch_shows_no_secret_in_its_evidence(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """FAULTS 59/60: a `sh -c` command carrying a password and a key, an engine that prints its
    command line (and the key in its own words) and exits: neither value reaches the shown
    command, the log excerpt, the pattern hits or the launch finding."""
    from servegate.environment.fingerprint import launch_record
    from servegate.gates.startup.launch import judge_launch

    monkeypatch.setenv("SG_TEST_ENGINE_KEY", ENV_KEY)
    script = (
        f"echo engine --password {SHELL_PW} --api-key={SHELL_KEY}; "
        f"echo \"non-default args: {{'api_key': ['{SHELL_KEY}']}}\"; "
        f'echo "Traceback (most recent call last):"; echo "  File x"; '
        f'echo "ValueError: bad key {SHELL_KEY} and $SG_TEST_ENGINE_KEY"; exit 3'
    )
    cfg = EndpointConfig.model_validate(
        {"api_key_env": "SG_TEST_ENGINE_KEY",
         "launch": {"command": ["sh", "-c", f"{script} --password {SHELL_PW}"],
                    "ready_timeout_s": 20}}
    )  # fmt: skip
    managed = await launch("candidate", cfg, tmp_path, load_catalogue())
    ev = managed.evidence
    assert ev.outcome is LaunchOutcome.EXITED
    assert "ValueError: bad key" in ev.log_tail  # the log was read
    assert any(h.kind == "traceback" for h in ev.hits)
    _, findings = judge_launch(None, ev)
    record = launch_record(ev, None, None, "")
    texts = {
        "command": ev.command,
        "log_tail": ev.log_tail,
        "hits": repr(ev.hits),
        "reason": ev.reason,
        "findings": repr(findings),
        "record": record.model_dump_json(),
    }
    for secret in (SHELL_PW, SHELL_KEY, ENV_KEY):
        assert [name for name, text in texts.items() if secret in text] == [], secret
    assert "--password" in ev.command
