"""Gate 1 for engines servegate starts itself: did it come up, and what did its log say?

`LaunchEvidence` (`servegate.managed.launch_evidence`) is what the launcher saw (times, exit,
log tail, pattern hits); `judge_launch` turns a baseline's and a candidate's into checks and
findings. Log hits are judged relative to the baseline, like every probe: a fallback both sides
print is reported, one only the candidate prints blocks.
"""

from __future__ import annotations

from collections.abc import Sequence

from servegate.managed.launch_evidence import LaunchEvidence
from servegate.verdict.judgement import check, not_measured
from servegate.verdict.model import Check, Finding, MetricValue, Severity


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} s"


def _start_finding(ev: LaunchEvidence, *, critical: bool) -> Finding:
    blocker = next((h for h in ev.hits if h.kind == "optional-dependency"), None)
    message = f"the {ev.side} did not start: {ev.reason}"
    category = f"launch-{ev.outcome.value}"
    if blocker is not None:
        category = "optional-dependency"
        message += (
            f"; an optional dependency blocks start-up: module {blocker.module!r} ({blocker.line})"
        )
    excerpt = f"$ {ev.command}\n(log {ev.log_path})\n{ev.log_tail}"
    return Finding(
        probe="launch",
        category=category,
        severity=Severity.CRITICAL if critical else Severity.INFO,
        side=ev.side,
        message=message,
        baseline_excerpt=None if critical else excerpt,
        candidate_excerpt=excerpt if critical else None,
    )


def _hit_findings(b: LaunchEvidence | None, c: LaunchEvidence | None) -> list[Finding]:
    out: list[Finding] = []
    base_keys = {h.key for h in b.hits} if b is not None else set()
    cand_keys = {h.key for h in c.hits} if c is not None else set()
    for h in c.hits if c is not None else ():
        new = b is not None and h.key not in base_keys
        severity = h.severity if new else Severity.INFO
        why = (
            "only the candidate's log shows it"
            if new
            else "the baseline's log shows it too"
            if b is not None
            else "the baseline's log was not read"
        )
        out.append(
            Finding(
                probe=f"log:{h.pattern}",
                category=h.kind,
                severity=severity,
                side=c.side if c is not None else None,
                message=f"start-up log {h.kind}"
                + (f" (module {h.module})" if h.module else "")
                + f": {why}",
                candidate_excerpt=h.describe(),
            )
        )
    for h in b.hits if b is not None else ():
        if h.key in cand_keys:
            continue
        out.append(
            Finding(
                probe=f"log:{h.pattern}",
                category=h.kind,
                severity=Severity.INFO,
                side=b.side if b is not None else None,
                message=f"start-up log {h.kind}: only the baseline's log shows it",
                baseline_excerpt=h.describe(),
            )
        )
    return out


def launch_metrics(b: LaunchEvidence | None, c: LaunchEvidence | None) -> dict[str, MetricValue]:
    """Load and ready times and peak memory of each managed side (seconds, MiB)."""
    metrics: dict[str, MetricValue] = {}
    for ev in (b, c):
        if ev is None:
            continue
        metrics[f"{ev.side}_load_s"] = _round(ev.port_open_s)
        metrics[f"{ev.side}_launch_ready_s"] = _round(ev.ready_s)
        metrics[f"{ev.side}_startup_peak_rss_mb"] = _round(ev.peak_rss_mb)
        metrics[f"{ev.side}_startup_gpu_memory_mb"] = _round(ev.gpu_memory_mb)
    return metrics


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def judge_launch(
    b: LaunchEvidence | None, c: LaunchEvidence | None
) -> tuple[list[Check], list[Finding]]:
    """Checks and findings of the managed launches; none when neither side was launched."""
    if b is None and c is None:
        return [], []
    checks: list[Check] = []
    findings: list[Finding] = []
    title = "the engine servegate launched answers a real completion"
    if b is not None and not b.ready:
        findings.append(_start_finding(b, critical=False))
        checks.append(not_measured("launch", title, f"the baseline did not start: {b.message}",
                                   core=True))  # fmt: skip
    elif c is not None:
        if not c.ready:
            findings.append(_start_finding(c, critical=True))
        checks.append(
            check(
                "launch",
                title,
                failed=not c.ready,
                core=True,
                baseline=_seconds(b.ready_s) if b is not None else "not launched",
                candidate=_seconds(c.ready_s) if c.ready else c.message,
                limit=f"ready within {c.timeout_s:g} s (launch.ready_timeout_s)",
                reason="" if c.ready else f"the candidate did not start: {c.reason}"[:300],
            )
        )
    findings += _hit_findings(b, c)
    checks.append(_log_check(b, c, findings))
    return checks, findings


def _log_check(
    b: LaunchEvidence | None, c: LaunchEvidence | None, findings: Sequence[Finding]
) -> Check:
    title = "start-up log: no fallback, unknown operator or traceback the baseline lacks"
    if c is None:
        return not_measured("log_scan", title, "the candidate was not launched by servegate")
    if b is None:
        return not_measured(
            "log_scan", title, "the baseline was not launched by servegate, so its log was not "
            "read and a line in the candidate's cannot be told new"
        )  # fmt: skip
    new = [f for f in findings if f.probe.startswith("log:") and f.side == c.side and f.blocking]
    return check(
        "log_scan",
        title,
        failed=bool(new),
        baseline=f"{len(b.hits)} pattern hit(s)",
        candidate=f"{len(c.hits)} pattern hit(s), {len(new)} new and blocking",
        reason="; ".join(f"{f.category}: {f.candidate_excerpt}" for f in new[:3])[:300],
        row="start-up log",
    )
