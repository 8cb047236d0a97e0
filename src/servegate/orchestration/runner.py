"""config -> endpoints -> gates -> verdict -> store/reports: one `servegate gate` run."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from sqlalchemy import Engine

from servegate import __version__
from servegate.config.models import PORT_PLACEHOLDER, EndpointConfig, GateConfig
from servegate.config.redaction import environment_secrets, hide
from servegate.endpoints.http import OpenAIEndpoint
from servegate.endpoints.protocol import Endpoint
from servegate.endpoints.recording import HeldRecords, NullRecorder, Recorder
from servegate.endpoints.urls import display_url, normalise_url
from servegate.gates import startup
from servegate.gates.pair import EndpointPair
from servegate.gates.performance.table import performance_evidence, performance_table
from servegate.gates.startup.launch import judge_launch, launch_metrics
from servegate.managed.launch_evidence import LaunchEvidence
from servegate.managed.launcher import Managed
from servegate.managed.sides import launched
from servegate.orchestration.fingerprints import (
    endpoint_fingerprint,
    resume_refusal,
    run_fingerprints,
    stored_fingerprint,
    with_launch,
)
from servegate.orchestration.gate_sequence import (
    GATE_ORDER,
    GATES,
    GateProgress,
    GateRunner,
    ProgressFn,
    after_deadline,
    run_gates,
)
from servegate.orchestration.inputs import check_inputs
from servegate.orchestration.preflight import Preflight, PreflightError, choose_model, preflight
from servegate.store.baselines import (
    StoredBaseline,
    baseline_refusal,
    load_baseline,
    stored_endpoint,
)
from servegate.store.resume import ResumePoint
from servegate.store.writer import RunWriter, StoreError
from servegate.verdict.correctness import correctness_table
from servegate.verdict.judgement import gate_result
from servegate.verdict.model import Fingerprint, GateResult, Report, Status
from servegate.verdict.rules import EXIT_INCONCLUSIVE, EXIT_USAGE, decide

# The gate table and run_gates live in gate_sequence.py; re-exported here for the CLI and matrix.
__all__ = [
    "DEFINITIONS",
    "GATES",
    "GATE_ORDER",
    "GateProgress",
    "GateRunner",
    "Preflight",
    "PreflightError",
    "ProgressFn",
    "preflight",
    "run",
    "run_fingerprints",
    "run_gates",
]

DEFINITIONS = {
    "ttft_ms": "first chunk carrying a token (content, reasoning, tool-call delta) - request sent",
    "e2el_ms": "last token chunk - request sent",
    "ready_ms": "latency of a real 1-token completion (not /health)",
    "impossible_ms": "time until a prompt longer than the context was answered or rejected",
    "exact_match_rate": "share of probes whose candidate text equals the baseline text exactly",
    "regressed": "probes the baseline passes and the candidate fails",
    "baseline_fail": "probes the baseline itself fails (reported, not blocking)",
}


def _secrets(cfg: GateConfig) -> list[str]:
    """API keys, URL passwords and launch environment values of this run, and this process's
    secret-named variables: never written into a crash reason."""
    sides = [cfg.baseline, cfg.candidate] + (
        [cfg.baseline_replica] if cfg.baseline_replica is not None else []
    )
    found = [os.environ.get(s.api_key_env, "") for s in sides if s.api_key_env is not None]
    found += [urlsplit(s.url_template).password or "" for s in sides]
    found += [v for s in sides if s.launch is not None for v in s.launch.env.values()]
    found += environment_secrets()
    return sorted({s for s in found if len(s.strip()) >= 4}, key=len, reverse=True)


def _crash_reason(exc: BaseException, secrets: Sequence[str]) -> str:
    """`ExceptionClass: message`, one line, secrets replaced by `***`."""
    message = " ".join(str(exc).split())
    if not message and isinstance(exc, asyncio.CancelledError | KeyboardInterrupt):
        message = "the run was interrupted (Ctrl-C, a signal or a cancelled task)"
    message = hide(message, sorted(secrets, key=len, reverse=True))
    reason = f"{type(exc).__name__}: {message}" if message else type(exc).__name__
    return reason[:2000]


def _stored_baseline(cfg: GateConfig, store: Engine | None) -> StoredBaseline | None:
    if cfg.baseline_run is None:
        return None
    if store is None:
        raise PreflightError("--baseline-run needs the database that holds it", EXIT_USAGE)
    try:
        return load_baseline(store, cfg.baseline_run)
    except StoreError as exc:
        raise PreflightError(str(exc), exc.exit_code) from None


def _not_applicable_on_a_recording(name: str, why: str) -> GateRunner:
    """A gate that a stored baseline cannot answer: skipped with its reason. Not applicable, not
    "not measured": a skip never passes and never blocks, so a good candidate against a stored
    baseline exits 0."""

    async def skipped(pair: EndpointPair, cfg: GateConfig, progress: GateProgress) -> GateResult:
        return GateResult(name=name, status=Status.SKIP, summary=f"not applicable: {why}",
                          not_applicable=(f"{name}: {why}",))  # fmt: skip

    return skipped


# What a stored baseline has nothing to compare with.
ON_A_RECORDING = {
    "performance": _not_applicable_on_a_recording(
        "performance",
        "the baseline is a stored recording: latency and throughput are compared only between "
        "live servers measured in interleaved blocks, where the drift of a shared machine cancels",
    ),
    "sampling": _not_applicable_on_a_recording(
        "sampling",
        "the baseline is a stored recording: sampled draws are judged against a live baseline's "
        "own draws and report, and a recording has no draws to sample again",
    ),
}


def _launch_failed(
    cfg: GateConfig, launches: Mapping[str, LaunchEvidence], gates: Mapping[str, GateRunner]
) -> list[GateResult]:
    """A managed side did not start: Gate 1 is judged on its launch alone, the rest skip."""
    b, c = launches.get("baseline"), launches.get("candidate")
    checks, findings = judge_launch(b, c)
    result = gate_result(
        startup.NAME, checks, strict=cfg.strict, findings=findings, metrics=launch_metrics(b, c)
    )
    skipped = "skipped: a side servegate launched did not start (see startup)"
    return [result] + [
        GateResult(name=name, status=Status.SKIP, summary=skipped)
        for name in gates
        if name in cfg.gates and name != startup.NAME
    ]


def _run_folder(cfg: GateConfig) -> Path:
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    return cfg.run_dir / f"{stamp}-{os.getpid()}"


async def run(
    cfg: GateConfig,
    *,
    store: Engine | None = None,
    run_name: str | None = None,
    progress: ProgressFn | None = None,
    gates: Mapping[str, GateRunner] = GATES,
    resume: ResumePoint | None = None,
    recording: bool = False,
    shared: Mapping[str, Managed] | None = None,
) -> Report:
    """One complete gate run. Sides with a `launch` block are started first (their logs go to a
    folder under `cfg.run_dir`) and stopped when the run ends, however it ends. Raises
    ConfigError (a bad input file or category: check_inputs) before anything is launched or
    asked, and PreflightError before anything is judged. Once the run's row exists, each gate
    is committed as it finishes, and a run that raises is marked crashed. With `resume` (a
    killed run's ResumePoint, `store` holding it), the run continues as its next attempt:
    refused when an endpoint's fingerprint changed, the gates it judged are kept, the others
    are run.
    `recording` (`servegate baseline record`) lets both sides be one server. With
    `cfg.baseline_run`, the stored baseline of that name in `store` answers for the baseline
    (nothing is launched for it), and the performance gate is not applicable (skipped with its
    reason). `shared` holds sides already launched for several runs (a matrix's baseline per
    node): judged and fingerprinted as launched, neither started nor stopped by this run."""
    check_inputs(cfg)
    if resume is not None and store is None:
        raise PreflightError("resuming a run needs the database that holds it", EXIT_USAGE)
    stored = _stored_baseline(cfg, store)
    if stored is not None:
        gates = {**gates, **ON_A_RECORDING}
    if cfg.baseline.launch is None and cfg.candidate.launch is None:
        b_url, c_url = (
            normalise_url(cfg.baseline.url_template),
            normalise_url(cfg.candidate.url_template),
        )
        if b_url == c_url and not recording and stored is None:
            raise PreflightError(
                f"--baseline and --candidate are the same endpoint ({display_url(b_url)}); "
                "compare two different servers",
                EXIT_USAGE,
            )
    given = dict(shared or {})
    sides: tuple[tuple[str, EndpointConfig | None], ...] = (
        ("baseline", None if stored is not None or "baseline" in given else cfg.baseline),
        ("candidate", cfg.candidate),
        ("baseline-replica", cfg.baseline_replica),
    )
    if any(not side.evidence.ready for side in given.values()):
        sides = ()  # as when a side of its own did not start: the others are not started
    started = (datetime.now(UTC), time.perf_counter())  # launches count in the run's time
    async with launched(
        sides, _run_folder(cfg), log_patterns=cfg.log_patterns,
        probe_deadline_s=cfg.probe_deadline_s,
    ) as managed:  # fmt: skip
        return await _run(cfg, {**given, **managed}, started, store=store, run_name=run_name,
                          progress=progress, gates=gates, resume=resume,
                          stored=stored)  # fmt: skip


def _url_of(name: str, side: EndpointConfig, managed: Mapping[str, Managed]) -> str:
    """The side's OpenAI base URL: where servegate launched it, else as configured."""
    if name in managed:
        return normalise_url(managed[name].url)
    # A managed side left unstarted (an earlier side failed) gets a placeholder port.
    return normalise_url(side.url_template.replace(PORT_PLACEHOLDER, "0"))


def _refuse_unstarted_replica(managed: Mapping[str, Managed]) -> None:
    """A launched baseline-replica that did not start ends the run before anything is judged."""
    replica = managed.get("baseline-replica")
    if replica is not None and not replica.evidence.ready:
        raise PreflightError(
            f"the baseline-replica did not start: {replica.evidence.message} "
            f"(log {replica.evidence.log_path})",
            EXIT_INCONCLUSIVE,
        )


@dataclass(frozen=True)
class _Sides:
    """The run's endpoints, and the base URLs of baseline and candidate."""

    baseline: Endpoint
    candidate: Endpoint
    replica: Endpoint | None
    baseline_url: str
    candidate_url: str

    async def aclose(self) -> None:
        """Close baseline, candidate and replica, in that order."""
        await self.baseline.aclose()
        await self.candidate.aclose()
        if self.replica is not None:
            await self.replica.aclose()


def _sides(
    cfg: GateConfig,
    managed: Mapping[str, Managed],
    store: Engine | None,
    stored: StoredBaseline | None,
) -> _Sides:
    """The endpoints to compare: the baseline is the stored recording when the run has one."""
    b_url = _url_of("baseline", cfg.baseline, managed)
    c_url = _url_of("candidate", cfg.candidate, managed)
    baseline: Endpoint = (
        stored_endpoint(store, stored)
        if stored is not None and store is not None
        else OpenAIEndpoint("baseline", b_url, api_key_env=cfg.baseline.api_key_env)
    )
    candidate = OpenAIEndpoint("candidate", c_url, api_key_env=cfg.candidate.api_key_env)
    replica = (
        OpenAIEndpoint(
            "baseline-replica",
            _url_of("baseline-replica", cfg.baseline_replica, managed),
            api_key_env=cfg.baseline_replica.api_key_env,
        )
        if cfg.baseline_replica is not None
        else None
    )
    return _Sides(baseline, candidate, replica, b_url, c_url)


async def _preflight_sides(
    cfg: GateConfig, sides: _Sides, *, launch_failed: bool
) -> tuple[Preflight, Preflight, str | None]:
    """Each side's preflight (the replica's only checked) and the model to send; after a failed
    launch nothing is asked and the configured model stands."""
    if launch_failed:
        return Preflight(models=()), Preflight(models=()), cfg.model
    b_pre = await preflight(sides.baseline, cfg.probe_deadline_s)
    c_pre = await preflight(sides.candidate, cfg.probe_deadline_s)
    if sides.replica is not None:
        await preflight(sides.replica, cfg.probe_deadline_s)
    return b_pre, c_pre, choose_model(cfg, b_pre, c_pre)


async def _side_fingerprints(
    cfg: GateConfig,
    sides: _Sides,
    held: HeldRecords,
    model: str | None,
    listed: tuple[Preflight, Preflight],
    *,
    managed: Mapping[str, Managed],
    store: Engine | None,
    stored: StoredBaseline | None,
) -> tuple[Fingerprint, Fingerprint]:
    """Baseline and candidate fingerprints, their GETs held in `held`; a stored baseline's is
    the one its recording saw."""
    if stored is not None and store is not None:
        b_fp = stored_fingerprint(store, stored, model)
    else:
        b_fp = await endpoint_fingerprint("baseline", cfg.baseline, held.wrap(sides.baseline),
                                  display_url(sides.baseline_url), model, listed[0].models,
                                  managed)  # fmt: skip
    c_fp = await endpoint_fingerprint("candidate", cfg.candidate, held.wrap(sides.candidate),
                              display_url(sides.candidate_url), model, listed[1].models,
                              managed)  # fmt: skip
    return b_fp, c_fp


def _run_row(
    cfg: GateConfig,
    fingerprints: Mapping[str, Any],
    sides: _Sides,
    model: str | None,
    *,
    store: Engine | None,
    stored: StoredBaseline | None,
    resume: ResumePoint | None,
    run_name: str | None,
) -> RunWriter | None:
    """The run's row: refused when the stored baseline or the resumed run no longer matches
    these fingerprints; the resumed run's next attempt, else a new row; none without a store."""
    if stored is not None:
        refusal = baseline_refusal(stored, fingerprints)
        if refusal is not None:
            raise PreflightError(refusal, EXIT_USAGE)
    if store is None:
        return None
    if resume is not None:
        refusal = resume_refusal(resume, fingerprints)
        if refusal is not None:
            raise PreflightError(refusal, EXIT_USAGE)
        return RunWriter.resume(store, resume.run_id, resume.attempt)
    return RunWriter.start(
        store,
        baseline_url=display_url(sides.baseline_url),
        candidate_url=display_url(sides.candidate_url),
        model=model,
        config=cfg.model_dump(mode="json"),
        name=run_name,
        fingerprints=fingerprints,
    )


def _pair(
    cfg: GateConfig,
    sides: _Sides,
    model: str | None,
    recorder: Recorder,
    launches: Mapping[str, LaunchEvidence],
) -> EndpointPair:
    """What every gate is given: the sides, the model, the recorder and the run's limits."""
    return EndpointPair(
        sides.baseline, sides.candidate, model=model, recorder=recorder, replica=sides.replica,
        hung_after=cfg.hung_after_timeouts, timeout_factor=cfg.policy.timeout_latency_factor,
        launches=launches, sides_at_once=cfg.sides_at_once,
    )  # fmt: skip


async def _gate_results(
    pair: EndpointPair,
    cfg: GateConfig,
    writer: RunWriter | None,
    *,
    launch_failed: bool,
    progress: ProgressFn | None,
    gates: Mapping[str, GateRunner],
    resume: ResumePoint | None,
) -> list[GateResult]:
    """Every gate's result in the gate table's order, each committed as it is judged: a failed
    launch judges startup alone, and the run's deadline closes the gates it leaves."""
    previous = resume.finished if resume is not None else ()
    results: list[GateResult] = list(previous)

    def keep(result: GateResult) -> None:
        results.append(result)
        if writer is not None:
            writer.gate(result)

    if launch_failed:
        for result in _launch_failed(cfg, pair.launches, gates):
            keep(result)
    else:
        try:
            async with asyncio.timeout(cfg.run_deadline_s) as deadline:
                await run_gates(pair, cfg, progress, finished=keep, gates=gates, previous=previous)
        except TimeoutError:
            if not deadline.expired():
                raise
            for result in after_deadline(cfg, gates, results):
                keep(result)
    order = list(gates)
    results.sort(key=lambda r: order.index(r.name) if r.name in order else len(order))
    return results


def _report(
    results: Sequence[GateResult],
    fingerprints: tuple[Fingerprint, Fingerprint],
    writer: RunWriter | None,
    start: tuple[datetime, float],
) -> Report:
    """The run's report: the verdict decided from the gates' results, timed from `start`."""
    started, t0 = start
    verdict = decide(results)
    return Report(
        tool=f"servegate {__version__}",
        run_id=writer.run_id if writer is not None else "unsaved",
        started_at=started.isoformat(timespec="seconds"),
        finished_at=datetime.now(UTC).isoformat(timespec="seconds"),
        duration_s=round(time.perf_counter() - t0, 2),
        attempt=writer.attempt if writer is not None else 1,
        verdict=verdict.status,
        exit_code=verdict.exit_code,
        reason=verdict.reason,
        baseline=fingerprints[0],
        candidate=fingerprints[1],
        gates=tuple(results),
        correctness=correctness_table(results),
        performance=performance_table(results),
        performance_evidence=performance_evidence(results),
        definitions=DEFINITIONS,
    )


async def _run(
    cfg: GateConfig,
    managed: Mapping[str, Managed],
    start: tuple[datetime, float],
    *,
    store: Engine | None,
    run_name: str | None,
    progress: ProgressFn | None,
    gates: Mapping[str, GateRunner],
    resume: ResumePoint | None,
    stored: StoredBaseline | None,
) -> Report:
    """The run once its managed sides are up; its endpoints are closed however it ends."""
    _refuse_unstarted_replica(managed)
    sides = _sides(cfg, managed, store, stored)
    try:
        return await _compare(cfg, managed, sides, start, store=store, run_name=run_name,
                              progress=progress, gates=gates, resume=resume,
                              stored=stored)  # fmt: skip
    finally:
        await sides.aclose()


async def _compare(
    cfg: GateConfig,
    managed: Mapping[str, Managed],
    sides: _Sides,
    start: tuple[datetime, float],
    *,
    store: Engine | None,
    run_name: str | None,
    progress: ProgressFn | None,
    gates: Mapping[str, GateRunner],
    resume: ResumePoint | None,
    stored: StoredBaseline | None,
) -> Report:
    """Preflight, fingerprints and the run's row, then the gates; once the row exists, a run
    that raises is marked crashed (best effort) and the error goes on."""
    launches = {n: m.evidence for n, m in managed.items() if n in ("baseline", "candidate")}
    failed = any(not ev.ready for ev in launches.values())
    b_pre, c_pre, model = await _preflight_sides(cfg, sides, launch_failed=failed)
    # The fingerprint's GETs are sent before the run's row exists: kept here, recorded
    # under gate "fingerprint" once it does.
    held = HeldRecords()
    b_fp, c_fp = await _side_fingerprints(cfg, sides, held, model, (b_pre, c_pre),
                                          managed=managed, store=store, stored=stored)  # fmt: skip
    fingerprints = run_fingerprints(cfg, {"baseline": b_fp, "candidate": c_fp})
    writer = _run_row(cfg, fingerprints, sides, model, store=store, stored=stored,
                      resume=resume, run_name=run_name)  # fmt: skip
    if resume is not None and store is not None:
        start = (datetime.fromisoformat(resume.started_at), start[1])
    try:
        recorder: Recorder = writer if writer is not None else NullRecorder()
        held.flush(recorder)
        pair = _pair(cfg, sides, model, recorder, launches)
        results = await _gate_results(pair, cfg, writer, launch_failed=failed,
                                      progress=progress, gates=gates, resume=resume)  # fmt: skip
        # Memory peaks cover the whole run: read them now.
        b_fp = with_launch(b_fp, managed.get("baseline"))
        c_fp = with_launch(c_fp, managed.get("candidate"))
        report = _report(results, (b_fp, c_fp), writer, start)
        if writer is not None:
            writer.finish(report)
        return report
    except BaseException as exc:
        if writer is not None:
            # Best effort: the database may be what failed; the original error is raised.
            with contextlib.suppress(StoreError):
                writer.crashed(_crash_reason(exc, _secrets(cfg)))
        raise
