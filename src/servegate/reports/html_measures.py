"""The measured sections of the HTML report: drift (with its plot), latency (with its CDF) and
the noise floor. Each draws only numbers the report (or the run's recorded timings) holds, and
says what is missing instead of inventing it."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from servegate.reports.html_sections import esc, note, section, status, table
from servegate.reports.svg import DriftPoint, drift_plot, latency_cdf
from servegate.verdict.model import MetricValue, Report


def drift(report: Report) -> str:
    divergences = [d for g in report.gates for d in g.divergences]
    if not divergences:
        return section("drift", "Drift explained", note("The report records no divergence."))
    rows = [
        (
            esc(d.gate),
            esc(d.probe),
            esc("-" if d.token_index is None else d.token_index),
            esc(f"{d.baseline_token!r} → {d.candidate_token!r}"),
            esc(_num(d.margin_nats)),
            esc(_num(d.gap_nats)),
            esc(f"{d.candidate_in_baseline_top_k}, {d.baseline_in_candidate_top_k}"),
            esc(d.explanation + (f" ({d.note})" if d.note else "")),
            status("fail" if d.blocking else "pass"),
        )
        for d in divergences
    ]
    header = (
        "gate",
        "probe",
        "token",
        "baseline → candidate",
        "margin (nats)",
        "gap (nats)",
        "in top-k (c∈b, b∈c)",
        "explanation",
        "blocking",
    )
    points = [
        DriftPoint(
            f"{d.gate} {d.probe} token {d.token_index}", d.margin_nats, d.gap_nats, d.blocking
        )
        for d in divergences
        if d.margin_nats is not None and d.gap_nats is not None
    ]
    tie = _metric(report, "near_tie_limit_nats")
    plot = drift_plot(points, near_tie_nats=tie, title="logprob drift at each divergence")
    missing = len(divergences) - len(points)
    parts = [plot or note("No divergence carries both a margin and a gap: nothing to plot.")]
    if plot and missing:
        parts.append(note(f"{missing} divergence(s) without logprobs are in the table only."))
    return section("drift", "Drift explained", *parts, table(header, rows))


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}"


def _metric(report: Report, name: str) -> float | None:
    for g in report.gates:
        value = g.metrics.get(name)
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
    return None


def latency(report: Report, samples_ms: Mapping[str, Sequence[float]] | None) -> str:
    plot = latency_cdf(samples_ms or {}, title="end-to-end latency per request (CDF)")
    if plot:
        about = (
            "Each successful request of the run, per side, as recorded (isolation requests "
            "left out): gate probes, not a load test; both sides answered the same requests."
        )
    else:
        about = (
            "No per-request timings: the report does not hold them (`servegate report RUN` "
            "adds those recorded in the run database). Only the latency figures below are known."
        )
    parts = [plot, note(about)] if plot else [note(about)]
    rows = [
        (esc(g.name), esc(k), esc(_show(v)))
        for g in report.gates
        for k, v in g.metrics.items()
        if k.endswith("_ms")
    ]
    if rows:
        parts.append(table(("gate", "metric", "value"), rows))
    return section("latency", "Latency", *parts)


def _show(value: MetricValue) -> str:
    if isinstance(value, float):
        return "nan" if math.isnan(value) else f"{value:.4g}"
    return "-" if value is None else str(value)


def noise_floor(report: Report) -> str:
    rows = [
        (esc(g.name), esc(k), esc(_show(v)), esc(report.definitions.get(k, "")))
        for g in report.gates
        for k, v in g.metrics.items()
        if k.startswith("aa_")
    ]
    if not rows:
        return section(
            "noise",
            "Noise floor",
            note("The report holds no A/A noise floor (numerics did not run)."),
        )
    caption = note(
        "The baseline measured against itself (A/A) and along its equivalent paths; "
        "the candidate's drift is judged against this floor."
    )
    return section(
        "noise", "Noise floor", caption, table(("gate", "metric", "value", "definition"), rows)
    )
