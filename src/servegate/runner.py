"""config -> endpoints -> gates -> verdict -> store/reports: one `servegate gate` run."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from urllib.parse import urlsplit, urlunsplit

from sqlalchemy import Engine

from servegate import __version__
from servegate.config.models import GateConfig
from servegate.endpoints.http import OpenAIEndpoint
from servegate.endpoints.protocol import Endpoint
from servegate.gates import context, golden, numerics, startup
from servegate.gates.pair import EndpointPair, NullRecorder, Recorder
from servegate.store.writer import RunWriter
from servegate.verdict.correctness import correctness_table
from servegate.verdict.model import Fingerprint, GateResult, Report, Status
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
    return startup.evaluate(await startup.collect(pair, cfg), cfg.policy)


async def _numerics(pair: EndpointPair, cfg: GateConfig, progress: GateProgress) -> GateResult:
    opts = numerics.NumericsConfig(prompts=numerics.PROMPTS[: cfg.numerics_prompts])
    evidence = await numerics.collect(pair, cfg, opts)
    return numerics.evaluate(evidence, cfg.policy, strict=cfg.strict)


async def _golden(pair: EndpointPair, cfg: GateConfig, progress: GateProgress) -> GateResult:
    return golden.evaluate(await golden.collect(pair, cfg, progress=progress), cfg.policy)


async def _context(pair: EndpointPair, cfg: GateConfig, progress: GateProgress) -> GateResult:
    return context.evaluate(await context.collect(pair, cfg, progress=progress), cfg.policy)


# Explicit registry, in the order the gates run: correctness before performance.
GATES: dict[str, GateRunner] = {
    "startup": _startup,
    "numerics": _numerics,
    "golden": _golden,
    "context": _context,
}
GATE_ORDER = tuple(GATES)


async def run_gates(
    pair: EndpointPair, cfg: GateConfig, progress: ProgressFn | None = None
) -> list[GateResult]:
    """Run the configured gates in order; a side that is not ready skips the rest."""
    results: list[GateResult] = []
    skip_reason: str | None = None
    for name, gate in GATES.items():
        if name not in cfg.gates:
            continue
        if skip_reason is not None:
            results.append(GateResult(name=name, status=Status.SKIP, summary=skip_reason))
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
        results.append(result)
        gate_progress(1, 1, str(result.status))
    return results


async def run(
    cfg: GateConfig,
    *,
    store: Engine | None = None,
    run_name: str | None = None,
    progress: ProgressFn | None = None,
) -> Report:
    """One complete gate run. Raises PreflightError before anything is judged."""
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
        recorder: Recorder = writer if writer is not None else NullRecorder()
        pair = EndpointPair(baseline, candidate, model=model, recorder=recorder, replica=replica)
        try:
            async with asyncio.timeout(cfg.run_deadline_s):
                results = await run_gates(pair, cfg, progress)
        except TimeoutError:
            results = [
                GateResult(
                    name="run",
                    status=Status.INCONCLUSIVE,
                    summary=f"the run deadline of {cfg.run_deadline_s:.0f} s expired",
                )
            ]
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
            correctness=correctness_table(results, cfg.policy),
            definitions=DEFINITIONS,
        )
        if writer is not None:
            for result in results:
                writer.gate(result)
            writer.finish(report)
        return report
    finally:
        await baseline.aclose()
        await candidate.aclose()
        if replica is not None:
            await replica.aclose()
