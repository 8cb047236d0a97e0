"""Every report format says where each gate's time went, part by part."""

from __future__ import annotations

import io
import json

import pytest
from rich.console import Console

from servegate.reports.html import render_html
from servegate.reports.json_report import dump_report
from servegate.reports.markdown import render_markdown
from servegate.reports.terminal import print_report
from servegate.verdict.model import GateTime, PartTime, Report


@pytest.fixture
def timed(failing_report: Report) -> Report:
    numerics = GateTime(
        seconds=69.3,
        requests={"baseline": 130, "candidate": 32},
        busy={"baseline": 66.0, "candidate": 24.5},
        parts=(
            PartTime(part="noise floor (the baseline's own paths)", seconds=41.25,
                     requests={"baseline": 98}),
            PartTime(part="prompt scoring (perplexity)", seconds=12.0,
                     requests={"baseline": 2, "candidate": 2}),
            PartTime(part="probes", seconds=9.5, requests={"baseline": 12, "candidate": 12}),
            PartTime(part="pilot", seconds=0.4, requests={"baseline": 1}),
        ),
    )  # fmt: skip
    gates = tuple(g.model_copy(update={"time": numerics}) if g.name == "numerics" else g
                  for g in failing_report.gates)  # fmt: skip
    return failing_report.model_copy(update={"gates": gates})


def test_the_json_report_holds_each_part(timed: Report) -> None:
    data = json.loads(dump_report(timed))
    [numerics] = [g for g in data["gates"] if g["name"] == "numerics"]
    assert numerics["time"]["parts"][0] == {
        "part": "noise floor (the baseline's own paths)",
        "seconds": 41.25,
        "requests": {"baseline": 98},
    }


def test_markdown_and_html_list_every_part_with_its_seconds_and_requests(timed: Report) -> None:
    md = render_markdown(timed)
    assert "| numerics | noise floor (the baseline's own paths) | 41.2 s | baseline 98 |" in md
    assert "| numerics | pilot | 0.4 s | baseline 1 |" in md
    assert (
        "| numerics | (each side busy) | baseline 66.0 s, candidate 24.5 s | "
        "baseline busy 95%, candidate busy 35% |"
    ) in md
    page = render_html(timed)
    assert "Where the time went" in page
    assert "<td>prompt scoring (perplexity)</td><td>12.0 s</td>" in page
    assert "baseline 2, candidate 2" in page


def test_the_terminal_names_each_gates_longest_parts(timed: Report) -> None:
    out = io.StringIO()
    print_report(timed, Console(file=out, width=400, color_system=None))
    text = out.getvalue()
    assert (
        "numerics: noise floor (the baseline's own paths) 41.2 s (98), "
        "prompt scoring (perplexity) 12.0 s (4), probes 9.5 s (24), and 1 more "
        "(baseline busy 95%, candidate busy 35%)"
    ) in text


def test_a_report_without_parts_prints_no_empty_table(failing_report: Report) -> None:
    assert "Where the time went" not in render_markdown(failing_report)
    assert "Where the time went" not in render_html(failing_report)


def test_every_format_says_what_a_budget_gave_each_gate_and_what_it_gave_up(timed: Report) -> None:
    plan = "4 of 12 probes, prompt scoring up to 14 s a side, not 600 s (estimated 19 s)"
    gates = tuple(
        g.model_copy(update={"time": g.time.model_copy(update={"share": 0.3, "plan": plan})})
        if g.time is not None else g
        for g in timed.gates
    )  # fmt: skip
    planned = timed.model_copy(update={"gates": gates})
    data = json.loads(dump_report(planned))
    [numerics] = [g for g in data["gates"] if g["name"] == "numerics"]
    assert (numerics["time"]["share"], numerics["time"]["plan"]) == (0.3, plan)
    assert f"| numerics | (budget plan) | 30% of its scalable work | {plan} |" in (
        render_markdown(planned)
    )
    assert f"<td>{plan}</td>" in render_html(planned)
    out = io.StringIO()
    print_report(planned, Console(file=out, width=400, color_system=None))
    assert "Budget plan (--budget: the power each gate gave up):" in out.getvalue()
    assert f"  - numerics: {plan}" in out.getvalue()


def test_a_run_without_a_budget_prints_no_plan(timed: Report) -> None:
    out = io.StringIO()
    print_report(timed, Console(file=out, width=400, color_system=None))
    assert "Budget plan" not in out.getvalue()
    assert "(budget plan)" not in render_markdown(timed)
