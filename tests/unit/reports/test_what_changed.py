"""The fingerprint diff and launch lines open every report format; old reports still load."""

from __future__ import annotations

import io
import json

from rich.console import Console

from servegate.reports.html import render_html
from servegate.reports.json_report import dump_report
from servegate.reports.markdown import render_markdown
from servegate.reports.terminal import print_report
from servegate.verdict.model import Fingerprint, LaunchRecord, Report


def _managed(report: Report) -> Report:
    launch = LaunchRecord(command="engine --port '{port}'", log_path="runs/x/candidate.log",
                          outcome="ready", message="ready in 2.53 s", pid=123, load_s=2.41,
                          ready_s=2.53, peak_rss_mb=336.8,
                          gpu_note="not measured: nvidia-smi not found")  # fmt: skip
    old = {"python.torch": "2.12.0", "cpu": "AMD EPYC"}
    new = {"python.torch": "2.13.0", "cpu": "AMD EPYC"}
    b = report.baseline.model_copy(update={"environment": old})
    c = report.candidate.model_copy(update={"environment": new, "launch": launch})
    return report.model_copy(update={"baseline": b, "candidate": c})


def _terminal(report: Report) -> str:
    out = io.StringIO()
    print_report(report, Console(file=out, width=200, color_system=None))
    return out.getvalue()


def test_every_format_opens_with_what_changed_and_the_launch(passing_report: Report) -> None:
    report = _managed(passing_report)
    launch = "candidate: ready — load 2.41 s, ready 2.53 s (from process start), peak RSS 336.8"
    term = _terminal(report)
    assert term.index("What changed") < term.index("Gates")
    assert "python.torch" in term
    assert "2.12.0" in term
    assert launch in term
    assert "GPU memory not measured: nvidia-smi not found" in term
    md = render_markdown(report)
    assert md.index("### What changed") < md.index("### Gates")
    assert "| python.torch | 2.12.0 | 2.13.0 |" in md
    assert "cpu |" not in md  # equal on both sides: not a change
    html = render_html(report)
    assert html.index('id="changes"') < html.index('id="gates"')
    assert "2.13.0" in html


def test_equal_fingerprints_say_nothing_changed(passing_report: Report) -> None:
    fp = Fingerprint(url="http://a/v1", model="m", matrix={"quant": "Q4_1"})
    report = passing_report.model_copy(update={"baseline": fp, "candidate": fp})
    assert "What changed: nothing: the 2 recorded fingerprint fields are equal" in _terminal(report)
    assert "_nothing: the 2 recorded fingerprint fields are equal_" in render_markdown(report)


def test_a_schema_2_report_without_environment_or_launch_still_loads(
    passing_report: Report,
) -> None:
    data = json.loads(dump_report(passing_report))
    data["schema_version"] = 2
    for side in ("baseline", "candidate"):
        del data[side]["environment"], data[side]["launch"]
    old = Report.model_validate(data)
    assert (old.schema_version, old.baseline.environment, old.candidate.launch) == (2, {}, None)
