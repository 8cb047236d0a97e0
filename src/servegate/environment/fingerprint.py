"""One side's fingerprint: the declared matrix, what its server says, and for a managed engine
its host environment and launch record."""

from __future__ import annotations

from servegate.config.models import EndpointConfig
from servegate.endpoints.http import http_stack
from servegate.endpoints.protocol import Endpoint
from servegate.environment.host import host_environment
from servegate.environment.server import server_info
from servegate.managed.launch_evidence import LaunchEvidence
from servegate.verdict.model import Fingerprint, LaunchRecord


def launch_record(
    ev: LaunchEvidence, peak_rss_mb: float | None, gpu_memory_mb: float | None, gpu_note: str
) -> LaunchRecord:
    """The report's record of a launch; memory peaks over the whole run when it was served."""
    return LaunchRecord(
        command=ev.command,
        log_path=ev.log_path,
        outcome=ev.outcome.value,
        message=ev.message,
        pid=ev.pid,
        load_s=None if ev.port_open_s is None else round(ev.port_open_s, 3),
        ready_s=None if ev.ready_s is None else round(ev.ready_s, 3),
        peak_rss_mb=None if peak_rss_mb is None else round(peak_rss_mb, 1),
        gpu_memory_mb=None if gpu_memory_mb is None else round(gpu_memory_mb, 1),
        gpu_note=gpu_note,
    )


async def host_fields(
    cfg: EndpointConfig,
    argv: list[str],
    env: dict[str, str],
    engine: dict[str, str] | None = None,
) -> dict[str, str]:
    """The host environment of a managed engine (empty for one servegate did not start), with
    what its start-up log said about the engine (`engine`, e.g. vLLM's `vllm.dtype`)."""
    if cfg.launch is None:
        return {}
    return {**await host_environment(argv, env, cfg.launch.cwd), **(engine or {})}


async def side_fingerprint(
    ep: Endpoint | None,
    cfg: EndpointConfig,
    *,
    url: str,
    model: str | None,
    models: tuple[str, ...] = (),
    host: dict[str, str] | None = None,
    launch: LaunchRecord | None = None,
) -> Fingerprint:
    """Merge the declared matrix, the server's own answers (when `ep` serves) and the host."""
    info = await server_info(ep, model) if ep is not None else None
    server = {} if ep is not None else {"server.not_served": "not asked: it was not serving"}
    return Fingerprint(
        url=url,
        model=model,
        version=info.version if info is not None else None,
        models=models,
        matrix=dict(cfg.matrix),
        environment={
            **(host or {}),
            **server,
            **(info.environment if info is not None else {}),
            # timings read by two different HTTP clients differ by the clients' own overhead
            "client.http": http_stack(url),
        },
        launch=launch,
    )
