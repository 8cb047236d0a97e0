"""The self-contained offline HTML report, rendered from the one `Report`.

One file, no script, no network: inline CSS (allowed by its hash in a strict
Content-Security-Policy), inline SVG plots, and the report itself as a JSON data block whose `<`,
`>` and `&` are escaped so no text inside can end the block. Verdict first, then correctness,
performance, the text of both sides, drift, latency, the noise floor, the environment and the
reproducers.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Mapping, Sequence

from servegate.reports import html_measures as m
from servegate.reports import html_sections as s
from servegate.reports.json_report import dump_report
from servegate.verdict.model import Report

CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:0 auto;max-width:1200px;padding:0 16px}
body{color:#1b1f24}
header.verdict{padding:12px 16px;margin:16px 0;border-radius:6px;border:2px solid #888}
header.verdict h1{margin:0 0 4px;font-size:24px}
header.pass{background:#e6f4ea;border-color:#2e7d32}header.fail{background:#fdecea;border-color:#c62828}
header.inconclusive,header.skip{background:#fff8e1;border-color:#f9a825}
nav a{margin-right:12px}
table{border-collapse:collapse;margin:8px 0;width:100%}
th,td{border:1px solid #d0d7de;padding:4px 8px;text-align:left;vertical-align:top}
th,td{word-break:break-word}
th{background:#f6f8fa}
.status{font-weight:600;white-space:nowrap}.status.pass{color:#2e7d32}.status.fail{color:#c62828}
.status.inconclusive,.status.not-measured{color:#b26a00}.status.skip,.status.info{color:#57606a}
pre{white-space:pre-wrap;word-break:break-all;background:#f6f8fa;padding:8px;margin:4px 0}
mark{background:#ffd7d5}
.cols{display:grid;grid-template-columns:1fr 1fr;gap:12px}
.note{color:#57606a}
svg{max-width:100%;height:auto;background:#fff}
svg .axis{stroke:#333}svg .grid{stroke:#eee}svg .tick,svg .label{font-size:11px;fill:#333}
svg polyline{fill:none;stroke-width:2}
svg line.series0,svg line.series1,svg line.series2{stroke-width:3}
svg .series0{stroke:#1f77b4}svg .series1{stroke:#ff7f0e}svg .series2{stroke:#2ca02c}
svg .limit{stroke:#888;stroke-dasharray:4 3}
svg .point{fill:#1f77b4}svg .point-blocking{fill:#c62828}
""".strip()

_NAV = (
    ("changes", "What changed"),
    ("correctness", "Correctness"),
    ("performance", "Performance"),
    ("texts", "Texts"),
    ("drift", "Drift"),
    ("latency", "Latency"),
    ("noise", "Noise floor"),
    ("environment", "Environment"),
    ("reproduce", "Reproduce"),
    ("not-measured", "Not measured"),
)


def _hash(text: str) -> str:
    return base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode("ascii")


CSP = (
    "default-src 'none'; script-src 'none'; object-src 'none'; base-uri 'none'; "
    f"form-action 'none'; img-src 'none'; style-src 'sha256-{_hash(CSS)}'"
)


def embedded_json(report: Report) -> str:
    """The report as JSON safe inside a `<script type="application/json">` data block."""
    text = json.dumps(json.loads(dump_report(report)), ensure_ascii=True, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def render_html(
    report: Report, *, latencies_ms: Mapping[str, Sequence[float]] | None = None
) -> str:
    """The whole report as one HTML page; `latencies_ms` are per-request timings by side, when
    the caller has them (the report itself holds none)."""
    nav = "".join(f'<a href="#{anchor}">{s.esc(title)}</a>' for anchor, title in _NAV)
    body = [
        s.verdict(report),
        f"<nav>{nav}</nav>",
        s.what_changed(report),
        s.gates(report),
        s.correctness(report),
        s.performance(report),
        s.findings(report),
        s.side_by_side(report),
        m.drift(report),
        m.latency(report, latencies_ms),
        m.noise_floor(report),
        s.environment(report),
        s.reproducers(report),
        s.not_measured(report),
    ]
    title = f"servegate {report.verdict.value.upper()}: run {report.run_id}"
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        '<meta name="referrer" content="no-referrer">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{s.esc(title)}</title><style>{CSS}</style></head>\n<body>\n"
        + "\n".join(body)
        + f'\n<script type="application/json" id="servegate-report">{embedded_json(report)}'
        "</script>\n</body></html>\n"
    )
