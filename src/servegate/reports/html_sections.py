"""The sections of the HTML report, each rendered from the one `Report` and nothing else.

Every piece of text that is not ours goes through `esc` exactly once: `plain` (control bytes
shown as escapes) and then HTML escaping, attributes included. Nothing is judged here.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from html import escape

from servegate.reports.plain import plain
from servegate.reports.svg import DriftPoint, drift_plot, latency_cdf
from servegate.verdict.model import Finding, GateResult, MetricValue, Report, Status

PERFORMANCE_GATES = ("perf", "performance")


def esc(value: object) -> str:
    """Text that is not ours, made inert for HTML (element content and quoted attributes)."""
    return escape(plain(value), quote=True)


def status(value: Status | str) -> str:
    name = str(value)
    return f'<span class="status {esc(name)}">{esc(name)}</span>'


def table(header: Sequence[str], rows: Iterable[Sequence[str]], css: str = "") -> str:
    """A table of cells that are already HTML (escaped by the caller)."""
    head = "".join(f"<th>{esc(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    cls = f' class="{css}"' if css else ""
    return f"<table{cls}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def section(anchor: str, title: str, *parts: str) -> str:
    return f'<section id="{anchor}"><h2>{esc(title)}</h2>{"".join(parts)}</section>'


def note(text: str) -> str:
    return f'<p class="note">{esc(text)}</p>'


def verdict(report: Report) -> str:
    v = report.verdict
    meaning = {
        Status.PASS: "ship it",
        Status.FAIL: "roll back",
        Status.INCONCLUSIVE: "could not decide",
        Status.SKIP: "nothing ran",
    }[v]
    return (
        f'<header class="verdict {esc(v.value)}"><h1>servegate: {esc(v.value.upper())} — '
        f"{esc(meaning)}</h1><p>{esc(report.reason)} (exit {report.exit_code})</p>"
        f"<p>run {esc(report.run_id)} · {esc(report.started_at)} · {report.duration_s:.1f} s · "
        f"{esc(report.tool)} · report schema {report.schema_version}</p></header>"
    )


def gates(report: Report) -> str:
    rows = [(esc(g.name), status(g.status), esc(g.summary)) for g in report.gates]
    return section("gates", "Gates", table(("gate", "status", "summary"), rows))


def correctness(report: Report) -> str:
    if not report.correctness:
        return section("correctness", "Correctness", note("No correctness gate ran."))
    rows = [
        (
            esc(r.metric),
            esc(r.gate),
            esc(r.baseline),
            esc(r.candidate),
            esc(r.threshold),
            status(r.status),
        )
        for r in report.correctness
    ]
    header = ("metric", "gate", "baseline", "candidate", "threshold", "status")
    return section("correctness", "Correctness", table(header, rows))


def performance(report: Report) -> str:
    perf = [g for g in report.gates if g.name in PERFORMANCE_GATES]
    if not perf:
        return section(
            "performance",
            "Performance",
            note(
                "This report holds no performance gate: performance was not "
                "measured in this run, so nothing here says it is fast or slow."
            ),
        )
    rows = [
        (esc(c.title), esc(c.baseline), esc(c.candidate), esc(c.limit), status(c.outcome))
        for g in perf
        for c in g.checks
    ]
    return section(
        "performance",
        "Performance",
        table(("metric", "baseline", "candidate", "threshold", "status"), rows),
    )


def _split(a: str, b: str) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def _side(text: str, at: int) -> str:
    return f"<pre>{esc(text[:at])}<mark>{esc(text[at:])}</mark></pre>"


def side_by_side(report: Report) -> str:
    """Each finding with text from both sides, the first differing character marked."""
    pairs = [
        (g, f)
        for g in report.gates
        for f in g.findings
        if f.baseline_excerpt is not None and f.candidate_excerpt is not None
    ]
    pairs.sort(key=lambda gf: not gf[1].blocking)
    if not pairs:
        return section(
            "texts",
            "Baseline and candidate text",
            note("No finding in this report carries text from both sides."),
        )
    blocks = []
    for g, f in pairs:
        b, c = plain(f.baseline_excerpt), plain(f.candidate_excerpt)
        at = _split(b, c)
        where = "identical" if b == c else f"first difference at character {at}"
        blocks.append(
            f'<div class="pair"><h3>{esc(g.name)} · {esc(f.probe)} · {esc(f.category)} '
            f"{status('fail' if f.blocking else 'info')}</h3><p>{esc(f.message)} ({where})</p>"
            f'<div class="cols"><div><h4>baseline</h4>{_side(b, at)}</div>'
            f"<div><h4>candidate</h4>{_side(c, at)}</div></div></div>"
        )
    caption = note(
        "Excerpts as the report holds them (cut to its excerpt length); the marked "
        "part starts at the first character where the two sides differ."
    )
    return section("texts", "Baseline and candidate text", caption, *blocks)


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


def environment(report: Report) -> str:
    sides = (report.baseline, report.candidate)
    keys = sorted({k for fp in sides for k in fp.matrix})
    rows = [
        ("url", *(esc(fp.url) for fp in sides)),
        ("model", *(esc(fp.model) for fp in sides)),
        ("version", *(esc(fp.version) for fp in sides)),
        ("models listed", *(esc(", ".join(fp.models)) for fp in sides)),
    ]
    rows += [(esc(k), *(esc(fp.matrix.get(k, "-")) for fp in sides)) for k in keys]
    return section(
        "environment", "Environment fingerprints", table(("field", "baseline", "candidate"), rows)
    )


def _finding_row(g: GateResult, f: Finding) -> tuple[str, ...]:
    return (
        esc(g.name),
        esc(f.probe),
        esc(f.category),
        status("fail" if f.blocking else "info"),
        esc(f.severity.value),
        esc(f.message),
    )


def findings(report: Report) -> str:
    every = [(g, f) for g in report.gates for f in g.findings]
    if not every:
        return section("findings", "Findings", note("No findings."))
    every.sort(key=lambda gf: not gf[1].blocking)
    header = ("gate", "probe", "category", "blocks", "severity", "message")
    return section("findings", "Findings", table(header, [_finding_row(g, f) for g, f in every]))


def reproducers(report: Report) -> str:
    failing = [(g, f) for g in report.gates for f in g.findings if f.blocking and f.curl]
    if not failing:
        return section("reproduce", "Reproduce", note("No blocking finding has a reproducer."))
    items = [
        f'<h3>{esc(g.name)} · {esc(f.probe)}</h3><pre class="curl">{esc(f.curl)}</pre>'
        for g, f in failing
    ]
    caption = note(
        "Each command replays the request to the candidate; the key is read from "
        "$OPENAI_API_KEY, never stored in the report."
    )
    return section("reproduce", "Reproduce", caption, *items)


def not_measured(report: Report) -> str:
    gaps = [f"<li>{esc(g.name)}: {esc(item)}</li>" for g in report.gates for item in g.not_measured]
    body = f"<ul>{''.join(gaps)}</ul>" if gaps else note("Everything was measured.")
    return section("not-measured", "Not measured (never counted as a pass)", body)
