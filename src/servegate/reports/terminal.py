"""The report for people: a verdict line, the gate table and the findings that matter."""

from __future__ import annotations

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from servegate.reports.changes import changes, launch_lines, summary
from servegate.reports.plain import plain
from servegate.reports.time_parts import budget_plans, largest_parts
from servegate.verdict.model import Report, Severity, Status

STATUS_STYLE = {
    Status.PASS: "bold green",
    Status.FAIL: "bold red",
    Status.INCONCLUSIVE: "bold yellow",
    Status.SKIP: "dim",
}
SEVERITY_ORDER = [Severity.CRITICAL, Severity.MAJOR, Severity.MINOR, Severity.INFO]


def _plain(text: str | None) -> Text:
    # Never interpret server text as markup or as a terminal escape (a model id from /v1/models,
    # an error message): control characters are shown as escapes, once, by `plain`.
    return Text(plain(text))


def render(report: Report, *, max_findings: int = 8, show_info: bool = False) -> Group:
    """A rich renderable of the whole report."""
    verdict = Text.assemble(
        ("verdict: ", "bold"),
        (str(report.verdict).upper(), STATUS_STYLE[report.verdict]),
        f"  (exit {report.exit_code}) {plain(report.reason)}",
    )
    header = _plain(
        f"baseline  {report.baseline.url}\ncandidate {report.candidate.url}\n"
        f"model {report.baseline.model or '-'}   run {report.run_id}   {report.duration_s:.1f} s"
        + (f"   resumed: attempt {report.attempt}" if report.attempt > 1 else "")
    )
    gates = Table(title="Gates", title_justify="left", show_lines=False)
    gates.add_column("gate")
    gates.add_column("status")
    gates.add_column("time")
    gates.add_column("summary", overflow="fold")
    for g in report.gates:
        status = Text(str(g.status), STATUS_STYLE[g.status])
        spent = Text(g.time.text() if g.time else "-")
        gates.add_row(_plain(g.name), status, spent, _plain(g.summary))
    spent_on = [(g.name, largest_parts(g)) for g in report.gates if largest_parts(g)]
    if spent_on:
        gates.caption = Text(
            "where the time went: " + "; ".join(f"{plain(n)}: {plain(p)}" for n, p in spent_on)
        )
        gates.caption_justify = "left"
    parts: list[Table | Text] = [header, *_what_changed(report), gates]
    if plans := budget_plans(report):
        parts.append(Text("Budget plan (--budget: the power each gate gave up):", style="bold"))
        parts.append(_plain("\n".join(f"  - {name}: {plan}" for name, plan in plans)))
    if report.correctness:
        table = Table(title="Correctness Report", title_justify="left")
        for col in ("metric", "baseline", "candidate", "threshold", "status"):
            table.add_column(col, overflow="fold")
        for row in report.correctness:
            table.add_row(
                _plain(row.metric),
                _plain(row.baseline),
                _plain(row.candidate),
                _plain(row.threshold),
                Text(str(row.status), STATUS_STYLE[row.status]),
            )
        parts.append(table)
    if report.performance:
        parts += _performance(report)
    drift = _drift_explained(report)
    if drift is not None:
        parts.append(drift)
    gaps = [f"{g.name}: {item}" for g in report.gates for item in g.not_measured]
    if gaps:
        parts.append(Text("Not measured (never counted as a pass):", style="bold yellow"))
        parts.append(_plain("\n".join(f"  - {item}" for item in gaps)))
    offered = [f"{g.name}: {item}" for g in report.gates for item in g.not_applicable]
    if offered:
        parts.append(Text("Not applicable (not offered by a server; not a pass):", style="bold"))
        parts.append(_plain("\n".join(f"  - {item}" for item in offered)))
    findings = [
        f for g in report.gates for f in g.findings if show_info or f.severity is not Severity.INFO
    ]
    findings.sort(key=lambda f: SEVERITY_ORDER.index(f.severity))
    if findings:
        table = Table(title="Findings", title_justify="left", show_lines=True)
        for col in ("probe", "category", "severity", "baseline", "candidate"):
            table.add_column(col, overflow="fold")
        for f in findings[:max_findings]:
            table.add_row(
                _plain(f.probe),
                _plain(f.category),
                _plain(str(f.severity)),
                _plain(f.baseline_excerpt),
                _plain(f.candidate_excerpt),
            )
        parts.append(table)
        if len(findings) > max_findings:
            parts.append(Text(f"… {len(findings) - max_findings} more findings in the JSON report"))
    parts.append(verdict)
    return Group(*parts)


def _what_changed(report: Report) -> list[Table | Text]:
    """The fingerprint diff and the launch lines: first thing after the header."""
    rows, compared = changes(report)
    out: list[Table | Text] = []
    if rows:
        table = Table(title="What changed", title_justify="left")
        for col in ("field", "baseline", "candidate"):
            table.add_column(col, overflow="fold")
        for row in rows:
            table.add_row(_plain(row.field), _plain(row.baseline), _plain(row.candidate))
        out.append(table)
    else:
        out.append(_plain(f"What changed: {summary(compared, 0)}"))
    launches = launch_lines(report)
    if launches:
        out.append(_plain("Launched by servegate:\n" + "\n".join(f"  {x}" for x in launches)))
    return out


def _performance(report: Report) -> list[Table | Text]:
    """Baseline vs candidate under load, with each metric's definition printed under the table."""
    table = Table(title="Performance Report", title_justify="left")
    for col in ("metric", "baseline", "candidate", "ratio", "CI", "threshold", "status"):
        table.add_column(col, overflow="fold")
    for row in report.performance:
        table.add_row(
            row.metric, _plain(row.baseline), _plain(row.candidate), _plain(row.ratio),
            _plain(row.interval), _plain(row.threshold),
            Text(str(row.status), STATUS_STYLE[row.status]),
        )  # fmt: skip
    seen: dict[str, str] = {row.metric: row.definition for row in report.performance}
    parts: list[Table | Text] = [table]
    if report.performance_evidence:
        evidence = Table(title="Under load, not judged", title_justify="left")
        for col in ("metric", "baseline", "candidate"):
            evidence.add_column(col, overflow="fold")
        for ev in report.performance_evidence:
            evidence.add_row(ev.metric, _plain(ev.baseline), _plain(ev.candidate))
            seen[ev.metric] = ev.definition
        parts.append(evidence)
    notes = "\n".join(f"  {metric}: {definition}" for metric, definition in seen.items())
    return [*parts, Text(notes, style="dim")]


def _nats(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _drift_explained(report: Report) -> Table | None:
    """Every divergence with where it happened and why it is (or is not) within noise."""
    rows = [d for g in report.gates for d in g.divergences]
    if not rows:
        return None
    ppl = next((c for g in report.gates for c in g.checks if c.name == "perplexity_shift"), None)
    caption: Text | None = None
    if ppl is not None:
        caption = Text(plain(f"perplexity shift: {ppl.candidate} ({ppl.outcome}; {ppl.limit})"))
    table = Table(title="Drift explained", title_justify="left", caption=caption,
                  caption_justify="left")  # fmt: skip
    for col in ("gate", "probe", "token", "baseline → candidate", "margin", "gap",
                "in top-k (c∈b, b∈c)", "explanation"):  # fmt: skip
        table.add_column(col, overflow="fold")
    for d in rows:
        tokens = f"{d.baseline_token!r} → {d.candidate_token!r}"
        membership = f"{d.candidate_in_baseline_top_k}, {d.baseline_in_candidate_top_k}"
        why = plain(d.explanation + (f" ({d.note})" if d.note else ""))
        table.add_row(
            _plain(d.gate), _plain(d.probe), "-" if d.token_index is None else str(d.token_index),
            _plain(tokens), _nats(d.margin_nats), _nats(d.gap_nats), membership,
            Text(why, style="bold red" if d.blocking else ""),
        )  # fmt: skip
    return table


def print_report(report: Report, console: Console, **kwargs: object) -> None:
    console.print(render(report, **kwargs))  # type: ignore[arg-type]
