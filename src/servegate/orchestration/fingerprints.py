"""What a run compared: each side's fingerprint, the run's flat fingerprints that a resumed run
must still match, and a stored baseline's fingerprint as its recording saw it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import Engine

from servegate import __version__
from servegate.config.models import EndpointConfig, GateConfig
from servegate.endpoints.protocol import Endpoint
from servegate.environment.fingerprint import host_fields, launch_record, side_fingerprint
from servegate.managed.launcher import Managed
from servegate.orchestration.preflight import PreflightError
from servegate.probes.loader import suite_identity
from servegate.store.baselines import StoredBaseline
from servegate.store.reader import stored_report
from servegate.store.resume import ResumePoint, changed
from servegate.store.writer import StoreError
from servegate.verdict.model import Fingerprint, LaunchRecord


def run_fingerprints(cfg: GateConfig, sides: Mapping[str, Fingerprint]) -> dict[str, Any]:
    """What a run compared, flat (`candidate.models`, `suite`, …): stored when the run starts
    and compared field by field when it is resumed."""
    flat: dict[str, Any] = {"servegate": __version__}
    if "golden" in cfg.gates:
        flat["suite"] = suite_identity(cfg.suite)
    for side, fp in sides.items():
        for key, value in fp.model_dump(mode="json").items():
            # The URL is in the configuration, compared there; a launch's times, memory and pid
            # differ on every start, its command does not.
            if key == "launch":
                flat[f"{side}.launch.command"] = value["command"] if value else None
            elif key != "url":
                flat[f"{side}.{key}"] = value
    return flat


def stored_fingerprint(store: Engine, stored: StoredBaseline, model: str | None) -> Fingerprint:
    """The baseline's fingerprint as its recording saw it, naming the stored baseline."""
    try:
        recorded = stored_report(store, stored.run_id).baseline
    except StoreError as exc:
        raise PreflightError(
            f"the stored baseline {stored.name!r} cannot be read: {exc}", exc.exit_code
        ) from None
    named = f"{stored.name} (recorded {stored.created_at}, run {stored.run_id})"
    return recorded.model_copy(update={"model": model, "stored_baseline": named})


def resume_refusal(resume: ResumePoint, now: Mapping[str, Any]) -> str | None:
    if not resume.fingerprints:
        return (
            f"run {resume.run_id} was recorded without endpoint fingerprints (by an older "
            "servegate): it cannot be resumed; start a new run"
        )
    why = changed(
        resume.fingerprints, now, "an endpoint or the suite changed since the run started"
    )
    return f"cannot resume run {resume.run_id}: {why}; start a new run" if why else None


def managed_launch_record(side: Managed) -> LaunchRecord:
    sampler = side.sampler
    if sampler is None:
        ev = side.evidence
        return launch_record(ev, ev.peak_rss_mb, ev.gpu_memory_mb, ev.gpu_note)
    return launch_record(side.evidence, sampler.peak_rss_mb, sampler.peak_gpu_mb, sampler.gpu_note)


def with_launch(fp: Fingerprint, side: Managed | None) -> Fingerprint:
    return fp if side is None else fp.model_copy(update={"launch": managed_launch_record(side)})


async def endpoint_fingerprint(
    name: str,
    cfg: EndpointConfig,
    ep: Endpoint,
    url: str,
    model: str | None,
    models: tuple[str, ...],
    managed: Mapping[str, Managed],
) -> Fingerprint:
    side = managed.get(name)
    if side is None and cfg.launch is not None:  # not started: an earlier side failed
        return await side_fingerprint(None, cfg, url="not started", model=model)
    if side is None:
        return await side_fingerprint(ep, cfg, url=url, model=model, models=models)
    host = await host_fields(cfg, side.argv, side.env, side.evidence.engine)
    served = ep if side.evidence.ready else None  # a failed launch is not asked anything
    return await side_fingerprint(
        served, cfg, url=url, model=model, models=models, host=host,
        launch=managed_launch_record(side),
    )  # fmt: skip
