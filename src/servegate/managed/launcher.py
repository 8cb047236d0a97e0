"""Start a managed engine, measure its start-up, and always stop it.

Times are from process start: `load` until its port accepts connections, `ready` until a real
completion succeeds (a green /health or /v1/models proves nothing). The engine runs under a
guard that leads its process group (`servegate.engine.process`), so servegate stops it, and
everything it started, on a normal end, a failure, Ctrl-C, and its own death (SIGKILL included).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import time
from dataclasses import dataclass, replace
from pathlib import Path
from urllib.parse import urlsplit

from servegate.config.models import PORT_PLACEHOLDER, EndpointConfig, LaunchConfig
from servegate.config.redaction import (
    command_secrets,
    environment_secrets,
    hide,
    secret_name,
    shown_command,
)
from servegate.endpoints.http import OpenAIEndpoint
from servegate.engine.process import free_port, log_tail, spawn, stop_group
from servegate.managed.launch_evidence import LaunchEvidence, LaunchOutcome, LogHit
from servegate.managed.logscan import LogPattern, scan_file
from servegate.managed.memory import MemorySampler
from servegate.managed.vllm_log import engine_facts_file, startup_note

POLL_S = 0.2
READY_BODY = {"prompt": "Hello", "max_tokens": 1, "temperature": 0}


def launch_secrets(cfg: EndpointConfig, argv: list[str]) -> list[str]:
    """What a launch knows to be secret: its command's key-like values (also inside a `sh -c`
    string), its secret-named environment values, the API key the side is called with, and this
    process's secret-named variables. Each is masked wherever an excerpt of the log shows it."""
    assert cfg.launch is not None
    found = command_secrets(argv)
    found += [v for k, v in cfg.launch.env.items() if secret_name(k)]
    if cfg.api_key_env is not None:
        found.append(os.environ.get(cfg.api_key_env, ""))
    return found + environment_secrets()


def _hidden_hit(hit: LogHit, secrets: list[str]) -> LogHit:
    return replace(hit, line=hide(hit.line, secrets))


def _fill(text: str, port: int) -> str:
    return text.replace(PORT_PLACEHOLDER, str(port))


@dataclass
class Managed:
    """A launched side: its URL, process and memory sampler, plus what its start-up showed."""

    side: str
    url: str
    argv: list[str]
    env: dict[str, str]
    launch: LaunchConfig
    evidence: LaunchEvidence
    process: subprocess.Popen[bytes] | None = None
    sampler: MemorySampler | None = None

    async def stop(self) -> None:
        """Stop the sampler and the whole process group; safe to call twice. The wait for the
        group (up to `stop_timeout_s`) runs in a thread: the event loop goes on serving."""
        if self.sampler is not None:
            await self.sampler.stop()
        process, self.process = self.process, None  # never signal a group id twice: reusable
        if process is not None:
            await asyncio.to_thread(stop_group, process, self.launch.stop_timeout_s)

    @property
    def pid(self) -> int | None:
        """The engine's process id (also its process group id), kept after it stopped."""
        return self.evidence.pid


async def _port_open(host: str, port: int) -> bool:
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout=1.0)
    except (OSError, TimeoutError):
        return False
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return True


async def _answers(ep: OpenAIEndpoint, deadline_s: float) -> bool:
    models = await ep.raw("GET", "/models", deadline_s=deadline_s)
    body: dict[str, object] = dict(READY_BODY)
    if models.ok:
        with contextlib.suppress(ValueError, AttributeError, TypeError, IndexError, KeyError):
            body["model"] = str(models.json()["data"][0]["id"])
    done = await ep.completion(body, deadline_s=deadline_s)
    return done.ok


async def launch(
    side: str,
    cfg: EndpointConfig,
    run_dir: Path,
    patterns: tuple[LogPattern, ...],
    *,
    probe_deadline_s: float = 15.0,
) -> Managed:
    """Start `cfg.launch` and wait until it answers a completion, exits, or times out. A side
    that did not become ready is already stopped; its evidence says why."""
    assert cfg.launch is not None
    spec = cfg.launch
    port = free_port()
    argv = [_fill(a, port) for a in spec.command]
    env = {**os.environ, **{k: _fill(v, port) for k, v in spec.env.items()}}
    url = _fill(cfg.url_template, port)
    os.makedirs(run_dir, exist_ok=True)
    log_path = run_dir / f"{side}.log"
    shown = shown_command(spec.command)  # `{port}` kept: the same engine, any port
    secrets = launch_secrets(cfg, argv)

    def result(outcome: LaunchOutcome, message: str, **kw: object) -> LaunchEvidence:
        # Everything read from the log is masked here, once: the report, the store and the
        # terminal only ever see this evidence.
        facts = engine_facts_file(log_path)
        return LaunchEvidence(
            side=side, command=shown, log_path=str(log_path), outcome=outcome,
            message=hide(message, secrets), timeout_s=spec.ready_timeout_s,
            log_tail=hide(log_tail(log_path), secrets),
            hits=tuple(_hidden_hit(h, secrets) for h in scan_file(log_path, patterns)),
            engine={k: hide(v, secrets) for k, v in facts.items()},
            **kw,  # type: ignore[arg-type]
        )  # fmt: skip

    managed = Managed(side=side, url=url, argv=argv, env=env, launch=spec,
                      evidence=result(LaunchOutcome.TIMEOUT, "not started"))  # fmt: skip
    parts = urlsplit(url)
    host = parts.hostname or "127.0.0.1"
    url_port = parts.port or (443 if parts.scheme == "https" else 80)
    if await _port_open(host, url_port):
        managed.evidence = result(
            LaunchOutcome.PORT_TAKEN,
            f"port {url_port} on {host} already accepts connections before the engine started "
            "(another process holds it; servegate would measure that one)",
        )
        return managed
    log_path.write_bytes(b"")
    began = time.perf_counter()
    try:
        # In a thread: the guard takes ~70 ms to report that the engine started.
        process = await asyncio.to_thread(
            spawn, argv, log_path, env=env, cwd=spec.cwd, grace_s=spec.stop_timeout_s
        )
    except OSError as exc:
        why = exc.strerror or type(exc).__name__
        managed.evidence = result(LaunchOutcome.NOT_FOUND,
                                  f"cannot execute {argv[0]!r}: {why}")  # fmt: skip
        return managed
    managed.process = process
    sampler = MemorySampler(process.pid, skip=frozenset({process.pid}))  # not the guard
    managed.sampler = sampler
    port_open_s: float | None = None
    endpoint = OpenAIEndpoint(side, url, api_key_env=cfg.api_key_env)  # an engine may demand it
    try:
        while True:
            await sampler.sample()
            elapsed = time.perf_counter() - began
            code = process.poll()
            if code is not None:
                outcome = LaunchOutcome.EXITED
                message = f"exited with code {code} during start-up after {elapsed:.1f} s"
                break
            if port_open_s is None and await _port_open(host, url_port):
                port_open_s = time.perf_counter() - began
            if port_open_s is not None and await _answers(
                endpoint, min(probe_deadline_s, max(1.0, spec.ready_timeout_s - elapsed))
            ):
                ready_s = time.perf_counter() - began
                note = startup_note(engine_facts_file(log_path))
                managed.evidence = result(
                    LaunchOutcome.READY, f"ready in {ready_s:.2f} s{note}", pid=process.pid,
                    port_open_s=port_open_s,
                    ready_s=ready_s, peak_rss_mb=sampler.peak_rss_mb,
                    gpu_memory_mb=sampler.peak_gpu_mb, gpu_note=sampler.gpu_note,
                )  # fmt: skip
                sampler.start()
                return managed
            if time.perf_counter() - began > spec.ready_timeout_s:
                outcome = LaunchOutcome.TIMEOUT
                message = f"did not answer a completion within {spec.ready_timeout_s:g} s"
                if port_open_s is None:
                    message += f" and never opened port {url_port}"
                if log_path.stat().st_size == 0:
                    message += "; it printed nothing"
                break
            await asyncio.sleep(POLL_S)
    except BaseException:
        await managed.stop()
        raise
    finally:
        await endpoint.aclose()
    await managed.stop()
    managed.evidence = result(
        outcome, message, pid=process.pid,
        exit_code=process.returncode if outcome is LaunchOutcome.EXITED else None,
        port_open_s=port_open_s, peak_rss_mb=sampler.peak_rss_mb,
        gpu_memory_mb=sampler.peak_gpu_mb, gpu_note=sampler.gpu_note,
    )  # fmt: skip
    return managed
