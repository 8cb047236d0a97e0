"""The Markdown report: a GitHub step summary or PR comment, rendered from the one `Report`.

Verdict first, then the gates, the Correctness Report, the Performance Report, the findings
that block, "Drift explained" and "Not measured". Nothing is judged here. Text from a server is
made `plain` and then escaped once: in table cells and prose (`|`, backticks, Markdown
punctuation, HTML), or shown in a fenced block longer than any backtick run it contains.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from servegate.endpoints.text import clip
from servegate.reports.changes import changes, launch_lines, summary
from servegate.reports.plain import plain
from servegate.reports.time_parts import NOTE, part_rows
from servegate.verdict.model import Finding, GateResult, Report, Status

# GitHub refuses a PR comment over 65,536 characters; stay under it with room for the footer.
MAX_CHARS = 60_000
EXCERPT_CHARS = 600

ICON = {Status.PASS: "✅", Status.FAIL: "❌", Status.INCONCLUSIVE: "⚠️", Status.SKIP: "⏭️"}
MEANING = {
    Status.PASS: "ship it",
    Status.FAIL: "roll back",
    Status.INCONCLUSIVE: "could not decide",
    Status.SKIP: "nothing ran",
}
# Every inline use follows text of ours, so only what acts mid-line needs a backslash.
_SPECIAL = re.compile(r"([\\`*_\[\]|~#])")


# After `@`, a zero-width space: model output saying "@octocat" in a PR comment or step
# summary mentions (and notifies) nobody. Code blocks need none: GitHub does not link there.
NO_MENTION = "@\u200b"


def inline(text: object) -> str:
    """Server text as inert Markdown inside a line or a table cell (no mention either)."""
    value = plain(text, one_line=True)
    value = value.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _SPECIAL.sub(r"\\\1", value).replace("@", NO_MENTION)


def block(text: object, info: str = "") -> str:
    """Server text as a fenced code block that no run of backticks inside it can close."""
    value = plain(text)
    longest = max((len(m) for m in re.findall(r"`+", value)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{info}\n{value}\n{fence}"


def _table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cells) + " |" for cells in rows]
    return lines


def _status(status: Status) -> str:
    return f"{ICON[status]} {status.value}"


def _head(report: Report) -> list[str]:
    verdict = report.verdict
    lines = [
        f"## servegate: {ICON[verdict]} {verdict.value.upper()} — {MEANING[verdict]}",
        "",
        f"**{inline(report.reason)}** (exit {report.exit_code})",
        "",
    ]
    for side, fp in (("baseline", report.baseline), ("candidate", report.candidate)):
        extra = [f"model {inline(fp.model)}" if fp.model else "model not named"]
        if fp.version:
            extra.append(f"version {inline(fp.version)}")
        extra += [f"{inline(k)}={inline(v)}" for k, v in fp.matrix.items()]
        lines.append(f"- {side}: {inline(fp.url)} · {' · '.join(extra)}")
    lines.append(
        f"- run {inline(report.run_id)}"
        + (f" (resumed: attempt {report.attempt})" if report.attempt > 1 else "")
        + f" · {report.duration_s:.1f} s · {inline(report.tool)}"
        f" · report schema {report.schema_version}"
    )
    return lines + _what_changed(report)


def _what_changed(report: Report) -> list[str]:
    rows, compared = changes(report)
    lines = ["", "### What changed", ""]
    if rows:
        table = [(inline(r.field), inline(r.baseline), inline(r.candidate)) for r in rows]
        lines += _table(("field", "baseline", "candidate"), table)
    else:
        lines.append(f"_{inline(summary(compared, 0))}_")
    launches = launch_lines(report)
    if launches:
        lines += ["", "Launched by servegate:", "", *(f"- {inline(x)}" for x in launches)]
    return lines


def _gates(report: Report) -> list[str]:
    rows = [
        (inline(g.name), _status(g.status), g.time.text() if g.time else "-", inline(g.summary))
        for g in report.gates
    ]
    lines = ["", "### Gates", "", *_table(("gate", "status", "time", "summary"), rows)]
    parts = [tuple(inline(x) for x in row) for row in part_rows(report)]
    if parts:
        lines += [
            "",
            "Where the time went:",
            "",
            *_table(("gate", "part", "time", "requests"), parts),
        ]
        lines += ["", f"_{inline(NOTE)}_"]
    return lines


def _correctness(report: Report) -> list[str]:
    if not report.correctness:
        return ["", "### Correctness Report", "", "_No correctness gate ran._"]
    header = ("metric", "baseline", "candidate", "threshold", "status")
    rows = [
        (inline(r.metric), inline(r.baseline), inline(r.candidate), inline(r.threshold),
         _status(r.status))
        for r in report.correctness
    ]  # fmt: skip
    return ["", "### Correctness Report", "", *_table(header, rows)]


def _performance(report: Report) -> list[str]:
    """Baseline vs candidate under load, then what was seen but not judged; nothing without
    a performance gate that ran."""
    if not report.performance and not report.performance_evidence:
        return []
    lines = ["", "### Performance Report", ""]
    header = ("metric", "baseline", "candidate", "ratio", "CI", "threshold", "status")
    lines += _table(
        header,
        [
            (inline(r.metric), inline(r.baseline), inline(r.candidate), inline(r.ratio),
             inline(r.interval), inline(r.threshold), _status(r.status))
            for r in report.performance
        ],
    )  # fmt: skip
    if report.performance_evidence:
        rows = [
            (inline(e.metric), inline(e.baseline), inline(e.candidate))
            for e in report.performance_evidence
        ]
        evidence = _table(("metric", "baseline", "candidate"), rows)
        lines += ["", "Under load, not judged:", "", *evidence]
    return lines


def _finding(gate: GateResult, f: Finding) -> list[str]:
    side = f" on the {inline(f.side)}" if f.side else ""
    lines = [
        f"#### {inline(gate.name)} · {inline(f.probe)} · {inline(f.category)}"
        f" ({f.severity.value}{side})",
        "",
        f"→ {inline(f.message)}",
        "",
    ]
    for label, text in (("baseline", f.baseline_excerpt), ("candidate", f.candidate_excerpt)):
        if text is not None:
            lines += [f"{label}:", "", block(clip(text, EXCERPT_CHARS), "text"), ""]
    if f.curl:
        lines += ["<details><summary>reproduce</summary>", "", block(f.curl, "sh"), "",
                  "</details>", ""]  # fmt: skip
    return lines


def _drift(report: Report) -> list[str]:
    rows = [
        (
            inline(d.gate), inline(d.probe),
            "-" if d.token_index is None else str(d.token_index),
            f"{inline(repr(d.baseline_token))} → {inline(repr(d.candidate_token))}",
            _nats(d.margin_nats), _nats(d.gap_nats),
            inline(d.explanation + (f" ({d.note})" if d.note else "")),
            "blocks" if d.blocking else "no",
        )
        for g in report.gates
        for d in g.divergences
    ]  # fmt: skip
    if not rows:
        return []
    header = ("gate", "probe", "token", "baseline → candidate", "margin (nats)", "gap (nats)",
              "explanation", "blocking")  # fmt: skip
    return ["", "### Drift explained", "", *_table(header, rows)]


def _nats(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _not_measured(report: Report) -> list[str]:
    gaps = [f"- {inline(g.name)}: {inline(item)}" for g in report.gates for item in g.not_measured]
    offered = [
        f"- {inline(g.name)}: {inline(item)}" for g in report.gates for item in g.not_applicable
    ]
    out = ["", "### Not measured (never counted as a pass)", "", *gaps] if gaps else []
    if offered:
        out += ["", "### Not applicable (a server does not offer it; not a pass)", "", *offered]
    return out


def render_markdown(report: Report, *, max_chars: int = MAX_CHARS) -> str:
    """The whole report as GitHub-flavoured Markdown, at most about `max_chars` characters."""
    lines = _head(report) + _gates(report) + _correctness(report) + _performance(report)
    blocking = [(g, f) for g in report.gates for f in g.findings if f.blocking]
    tail = _drift(report) + _not_measured(report)
    if blocking:
        lines += ["", f"### Findings that block ({len(blocking)})", ""]
    budget = max_chars - sum(len(x) + 1 for x in lines + tail) - 200
    shown = 0
    for gate, finding in blocking:
        part = _finding(gate, finding)
        size = sum(len(x) + 1 for x in part)
        if size > budget:
            break
        lines += part
        budget -= size
        shown += 1
    if shown < len(blocking):
        lines.append(
            f"_… {len(blocking) - shown} more blocking finding(s) in the JSON and HTML reports._"
        )
    return "\n".join(lines + tail) + "\n"
