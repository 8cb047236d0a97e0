"""config -> endpoints -> gates -> verdict -> store/reports: one `servegate gate` run."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from urllib.parse import urlsplit, urlunsplit

from sqlalchemy import Engine

from servegate import __version__
from servegate.config.models import GateConfig
from servegate.endpoints.http import OpenAIEndpoint
from servegate.endpoints.protocol import Endpoint
from servegate.gates import context, golden, numerics, performance, startup
from servegate.gates.pair import EndpointPair
from servegate.gates.recording import NullRecorder, Recorder
from servegate.store.writer import RunWriter, StoreError
from servegate.verdict.correctness import correctness_table
from servegate.verdict.model import Fingerprint, GateResult, Report, Status
from servegate.verdict.performance import performance_evidence, performance_table
from servegate.verdict.rules import EXIT_INCONCLUSIVE, EXIT_USAGE, decide

ProgressFn = Callable[[str, int, int, str], None]

DEFINITIONS = {
    "ttft_ms": "first chunk carrying a token (content, reasoning, tool-call delta) - request sent",
    "e2el_ms": "last token chunk - request sent",
    "ready_ms": "latency of a real 1-token completion (not /health)",
    "impossible_ms": "time until a prompt longer than the context was answered or rejected",
    "exact_match_rate": "share of probes whose candidate text equals the baseline text exactly",
    "regressed": "probes the baseline passes and the candidate fails",
    "baseline_fail": "probes the baseline itself fails (reported, not blocking)",
}


class PreflightError(Exception):
    """An endpoint cannot be compared at all; carries the exit code (2 usage, 3 inconclusive)."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def normalise_url(url: str) -> str:
    """`http://host:port` and `http://host:port/v1/` both mean the OpenAI base `…/v1`."""
    parts = urlsplit(url)
    path = parts.path.rstrip("/")
    if path == "":
        path = "/v1"
    return urlunsplit((parts.scheme, parts.netloc.lower(), path, "", ""))


def display_url(url: str) -> str:
    """The URL without user info or query (which can carry secrets)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


@dataclass(frozen=True)
class Preflight:
    models: tuple[str, ...]


async def preflight(ep: Endpoint, deadline_s: float) -> Preflight:
    """Is this an OpenAI-compatible server we can reach? Unreachable: 3; not OpenAI: 2."""
    resp = await ep.raw("GET", "/models", deadline_s=deadline_s)
    where = f"{ep.name} {display_url(ep.base_url)}"
    if resp.error is not None and resp.status is None:
        raise PreflightError(
            f"{where} unreachable: {resp.error.category}: {resp.error.message}", EXIT_INCONCLUSIVE
        )
    ctype = resp.headers.get("content-type", resp.headers.get("Content-Type", ""))
    try:
        data = resp.json() if resp.status == 200 else None
    except ValueError:
        data = None
    if not isinstance(data, dict) or not isinstance(data.get("data"), list):
        raise PreflightError(
            f"{where} does not look like an OpenAI-compatible server: GET /models answered "
            f"HTTP {resp.status} {ctype or 'without a content type'} (expected JSON with a 'data' "
            "list; is the URL's path right, e.g. http://host:port/v1?)",
            EXIT_USAGE,
        )
    ids = tuple(str(m.get("id")) for m in data["data"] if isinstance(m, dict))
    return Preflight(models=ids)


def _choose_model(cfg: GateConfig, b: Preflight, c: Preflight) -> str | None:
    if cfg.model is not None:
        return cfg.model
    common = [m for m in b.models if m in c.models] or list(b.models)
    return common[0] if common else None


GateProgress = Callable[[int, int, str], None]
GateRunner = Callable[[EndpointPair, GateConfig, GateProgress], Awaitable[GateResult]]


async def _startup(pair: EndpointPair, cfg: GateConfig, progress: GateProgress) -> GateResult:
    return startup.evaluate(await startup.collect(pair, cfg), cfg.policy, strict=cfg.strict)


async def _numerics(pair: EndpointPair, cfg: GateConfig, progress: GateProgress) -> GateResult:
    opts = numerics.NumericsConfig(prompts=numerics.PROMPTS[: cfg.numerics_prompts])
    evidence = await numerics.collect(pair, cfg, opts)
    return numerics.evaluate(evidence, cfg.policy, strict=cfg.strict)


async def _golden(pair: EndpointPair, cfg: GateConfig, progress: GateProgress) -> GateResult:
    evidence = await golden.collect(pair, cfg, progress=progress)
    return golden.evaluate(evidence, cfg.policy, strict=cfg.strict)


async def _context(pair: EndpointPair, cfg: GateConfig, progress: GateProgress) -> GateResult:
    evidence = await context.collect(pair, cfg, progress=progress)
    return context.evaluate(evidence, cfg.policy, strict=cfg.strict)


async def _performance(pair: EndpointPair, cfg: GateConfig, progress: GateProgress) -> GateResult:
    evidence = await performance.collect(pair, cfg, progress=progress)
    return performance.evaluate(evidence, cfg.policy, strict=cfg.strict)


# Explicit registry, in the order the gates run: correctness before performance.
GATES: dict[str, GateRunner] = {
    "startup": _startup,
    "numerics": _numerics,
    "golden": _golden,
    "context": _context,
    "performance": _performance,
}
GATE_ORDER = tuple(GATES)
# Judged only once every correctness gate that ran has passed: speed is not looked at before
# the answers are known to be right.
AFTER_CORRECTNESS = frozenset({"performance"})


def _correctness_not_passed(results: Sequence[GateResult]) -> str | None:
    """Why a performance gate is skipped: the correctness gates that ran and did not pass."""
    ran = [r for r in results if r.name not in AFTER_CORRECTNESS]
    blocking = [f"{r.name}: {r.status}" for r in ran if r.status is not Status.PASS]
    if not blocking:
        return None
    return (
        "skipped: performance is judged only after the correctness gates pass "
        f"({', '.join(blocking)})"
    )


async def run_gates(
    pair: EndpointPair,
    cfg: GateConfig,
    progress: ProgressFn | None = None,
    *,
    finished: Callable[[GateResult], None] | None = None,
    gates: Mapping[str, GateRunner] = GATES,
) -> list[GateResult]:
    """Run the configured gates in order; a side that is not ready skips the rest. Each result is
    handed to `finished` as soon as it is judged, so a caller that cancels the run (the run
    deadline, Ctrl-C) still holds every gate that finished."""
    results: list[GateResult] = []

    def judged(result: GateResult) -> None:
        results.append(result)
        if finished is not None:
            finished(result)

    skip_reason: str | None = None
    for name, gate in gates.items():
        if name not in cfg.gates:
            continue
        if skip_reason is not None:
            judged(GateResult(name=name, status=Status.SKIP, summary=skip_reason))
            continue
        waiting = _correctness_not_passed(results) if name in AFTER_CORRECTNESS else None
        if waiting is not None:
            judged(GateResult(name=name, status=Status.SKIP, summary=waiting))
            continue

        def gate_progress(done: int, total: int, label: str, _name: str = name) -> None:
            if progress is not None:
                progress(_name, done, total, label)

        gate_progress(0, 1, "")
        result = await gate(pair, cfg, gate_progress)
        if name == "startup" and (
            result.status is Status.INCONCLUSIVE or any(f.probe == "ready" for f in result.findings)
        ):
            skip_reason = "skipped: a side is not ready (see startup)"
        judged(result)
        gate_progress(1, 1, str(result.status))
    return results


def _after_deadline(
    cfg: GateConfig, gates: Mapping[str, GateRunner], finished: Sequence[GateResult]
) -> list[GateResult]:
    """The results of the gates the run deadline cut off: the first unfinished gate was running
    (gates only yield to the event loop inside a gate), the ones after it never started."""
    seen = {r.name for r in finished}
    todo = [name for name in gates if name in cfg.gates and name not in seen]
    expired = f"the run deadline of {cfg.run_deadline_s:g} s expired during this gate"
    return [
        GateResult(name=name, status=Status.INCONCLUSIVE, summary=expired)
        if i == 0
        else GateResult(
            name=name, status=Status.SKIP, summary="not started: the run deadline expired"
        )
        for i, name in enumerate(todo)
    ]


def _secrets(cfg: GateConfig) -> list[str]:
    """API keys and URL passwords of this run: never written into a crash reason."""
    sides = [cfg.baseline, cfg.candidate] + (
        [cfg.baseline_replica] if cfg.baseline_replica is not None else []
    )
    found = [os.environ.get(s.api_key_env, "") for s in sides if s.api_key_env is not None]
    found += [urlsplit(s.url).password or "" for s in sides]
    return [s for s in found if s]


def _crash_reason(exc: BaseException, secrets: Sequence[str]) -> str:
    """`ExceptionClass: message`, one line, secrets replaced by `***`."""
    message = " ".join(str(exc).split())
    if not message and isinstance(exc, asyncio.CancelledError | KeyboardInterrupt):
        message = "the run was interrupted (Ctrl-C, a signal or a cancelled task)"
    for secret in sorted(secrets, key=len, reverse=True):
        message = message.replace(secret, "***")
    reason = f"{type(exc).__name__}: {message}" if message else type(exc).__name__
    return reason[:2000]


async def run(
    cfg: GateConfig,
    *,
    store: Engine | None = None,
    run_name: str | None = None,
    progress: ProgressFn | None = None,
    gates: Mapping[str, GateRunner] = GATES,
) -> Report:
    """One complete gate run. Raises PreflightError before anything is judged. Once the run's row
    exists, each gate is committed as it finishes, and a run that raises is marked crashed."""
    b_url, c_url = normalise_url(cfg.baseline.url), normalise_url(cfg.candidate.url)
    if b_url == c_url:
        raise PreflightError(
            f"--baseline and --candidate are the same endpoint ({display_url(b_url)}); "
            "compare two different servers",
            EXIT_USAGE,
        )
    baseline = OpenAIEndpoint("baseline", b_url, api_key_env=cfg.baseline.api_key_env)
    candidate = OpenAIEndpoint("candidate", c_url, api_key_env=cfg.candidate.api_key_env)
    replica = (
        OpenAIEndpoint(
            "baseline-replica",
            normalise_url(cfg.baseline_replica.url),
            api_key_env=cfg.baseline_replica.api_key_env,
        )
        if cfg.baseline_replica is not None
        else None
    )
    started, t0 = datetime.now(UTC), time.perf_counter()
    try:
        b_pre = await preflight(baseline, cfg.probe_deadline_s)
        c_pre = await preflight(candidate, cfg.probe_deadline_s)
        if replica is not None:
            await preflight(replica, cfg.probe_deadline_s)
        model = _choose_model(cfg, b_pre, c_pre)
        writer = (
            RunWriter.start(
                store,
                baseline_url=display_url(b_url),
                candidate_url=display_url(c_url),
                model=model,
                config=cfg.model_dump(mode="json"),
                name=run_name,
            )
            if store is not None
            else None
        )
        try:
            recorder: Recorder = writer if writer is not None else NullRecorder()
            pair = EndpointPair(
                baseline, candidate, model=model, recorder=recorder, replica=replica,
                hung_after=cfg.hung_after_timeouts,
                timeout_factor=cfg.policy.timeout_latency_factor,
            )  # fmt: skip
            results: list[GateResult] = []

            def keep(result: GateResult) -> None:
                results.append(result)
                if writer is not None:
                    writer.gate(result)

            try:
                async with asyncio.timeout(cfg.run_deadline_s) as deadline:
                    await run_gates(pair, cfg, progress, finished=keep, gates=gates)
            except TimeoutError:
                if not deadline.expired():
                    raise
                for result in _after_deadline(cfg, gates, results):
                    keep(result)
            verdict = decide(results)
            report = Report(
                tool=f"servegate {__version__}",
                run_id=writer.run_id if writer is not None else "unsaved",
                started_at=started.isoformat(timespec="seconds"),
                finished_at=datetime.now(UTC).isoformat(timespec="seconds"),
                duration_s=round(time.perf_counter() - t0, 2),
                verdict=verdict.status,
                exit_code=verdict.exit_code,
                reason=verdict.reason,
                baseline=Fingerprint(url=display_url(b_url), model=model, models=b_pre.models),
                candidate=Fingerprint(url=display_url(c_url), model=model, models=c_pre.models),
                gates=tuple(results),
                correctness=correctness_table(results),
                performance=performance_table(results),
                performance_evidence=performance_evidence(results),
                definitions=DEFINITIONS,
            )
            if writer is not None:
                writer.finish(report)
            return report
        except BaseException as exc:
            if writer is not None:
                # Best effort: the database may be what failed; the original error is raised.
                with contextlib.suppress(StoreError):
                    writer.crashed(_crash_reason(exc, _secrets(cfg)))
            raise
    finally:
        await baseline.aclose()
        await candidate.aclose()
        if replica is not None:
            await replica.aclose()
