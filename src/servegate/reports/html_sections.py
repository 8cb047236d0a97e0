"""The sections of the HTML report, each rendered from the one `Report` and nothing else.

Every piece of text that is not ours goes through `esc` exactly once: `plain` (control bytes
shown as escapes) and then HTML escaping, attributes included. Nothing is judged here.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from html import escape

from servegate.reports.changes import changes, launch_lines, summary
from servegate.reports.plain import plain
from servegate.reports.time_parts import NOTE, part_rows
from servegate.verdict.model import Finding, GateResult, Report, Status

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
        f"<p>run {esc(report.run_id)}{_attempt(report)} · {esc(report.started_at)} · "
        f"{report.duration_s:.1f} s · "
        f"{esc(report.tool)} · report schema {report.schema_version}</p></header>"
    )


def _attempt(report: Report) -> str:
    return f" (resumed: attempt {report.attempt})" if report.attempt > 1 else ""


def gates(report: Report) -> str:
    rows = [
        (esc(g.name), status(g.status), esc(g.time.text() if g.time else "-"), esc(g.summary))
        for g in report.gates
    ]
    parts = [tuple(esc(x) for x in row) for row in part_rows(report)]
    spent = (
        "<h3>Where the time went</h3>"
        + table(("gate", "part", "time", "requests"), parts)
        + note(NOTE)
        if parts
        else ""
    )
    return section("gates", "Gates", table(("gate", "status", "time", "summary"), rows), spent)


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
    parts = [table(("metric", "baseline", "candidate", "threshold", "status"), rows)]
    if report.performance_evidence:
        parts.append(note("Under load, not judged:"))
        parts.append(
            table(
                ("metric", "baseline", "candidate", "definition"),
                [
                    (esc(e.metric), esc(e.baseline), esc(e.candidate), esc(e.definition))
                    for e in report.performance_evidence
                ],
            )
        )
    return section("performance", "Performance", *parts)


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


def environment(report: Report) -> str:
    sides = (report.baseline, report.candidate)
    keys = sorted({k for fp in sides for k in fp.matrix})
    env_keys = sorted({k for fp in sides for k in fp.environment})
    rows = [
        ("url", *(esc(fp.url) for fp in sides)),
        ("model", *(esc(fp.model) for fp in sides)),
        ("version", *(esc(fp.version) for fp in sides)),
        ("models listed", *(esc(", ".join(fp.models)) for fp in sides)),
    ]
    rows += [(esc(k), *(esc(fp.matrix.get(k, "-")) for fp in sides)) for k in keys]
    rows += [(esc(k), *(esc(fp.environment.get(k, "-")) for fp in sides)) for k in env_keys]
    return section(
        "environment", "Environment fingerprints", table(("field", "baseline", "candidate"), rows)
    )


def what_changed(report: Report) -> str:
    """The fingerprint diff and how each launched engine came up: the top of the page."""
    rows, compared = changes(report)
    parts = [
        table(
            ("field", "baseline", "candidate"),
            [(esc(r.field), esc(r.baseline), esc(r.candidate)) for r in rows],
        )
        if rows
        else note(f"What changed: {summary(compared, 0)}")
    ]
    launches = launch_lines(report)
    if launches:
        items = "".join(f"<li>{esc(x)}</li>" for x in launches)
        parts.append(f"<p>Launched by servegate:</p><ul>{items}</ul>")
    return section("changes", "What changed", *parts)


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
    offered = [
        f"<li>{esc(g.name)}: {esc(item)}</li>" for g in report.gates for item in g.not_applicable
    ]
    if offered:
        body += note("Not applicable (a server does not offer it; not a pass):")
        body += f"<ul>{''.join(offered)}</ul>"
    return section("not-measured", "Not measured (never counted as a pass)", body)
