"""The Markdown report: verdict first, server text inert, tables intact, within a PR comment."""

from __future__ import annotations

import re

import pytest

from servegate.reports.markdown import block, inline, render_markdown
from servegate.verdict.model import Report


def test_the_verdict_comes_first_and_names_what_to_do(failing_report: Report) -> None:
    text = render_markdown(failing_report)
    first = text.splitlines()[0]
    assert first == "## servegate: ❌ FAIL — roll back"
    assert "**failed: numerics, golden** (exit 1)" in text


def test_sections_follow_the_report(failing_report: Report) -> None:
    text = render_markdown(failing_report)
    heads = [line for line in text.splitlines() if line.startswith("### ")]
    assert heads == [
        "### What changed",
        "### Gates",
        "### Correctness Report",
        "### Findings that block (2)",
        "### Drift explained",
        "### Not measured (never counted as a pass)",
    ]
    assert "| deterministic pass rate | 100% | 0% | 100% | ❌ fail |" in text
    assert "golden: JSON parse rate: the candidate refused" in text


def test_info_findings_are_not_listed_as_blocking(failing_report: Report) -> None:
    text = render_markdown(failing_report)
    assert "refusal" not in text.split("### Findings that block")[1].split("### Drift")[0]


def test_every_table_row_keeps_its_column_count(failing_report: Report) -> None:
    text = render_markdown(failing_report)
    tables = [t.splitlines() for t in re.findall(r"^(\|.*?)\n(?!\|)", text, flags=re.M | re.S)]
    assert [t[0].split(" | ")[0] for t in tables] == ["| field", "| gate", "| metric", "| gate"]
    for rows in tables:
        # An unescaped pipe adds a column: count the separators that are not escaped.
        counts = {len(re.findall(r"(?<!\\)\|", row)) for row in rows}
        assert len(counts) == 1, rows


def test_server_text_never_becomes_html_or_markup(failing_report: Report) -> None:
    text = render_markdown(failing_report)
    outside_fences = re.sub(r"(`{3,})[a-z]*\n.*?\n\1", "", text, flags=re.S)
    assert "<script" not in outside_fences
    assert "<img" not in outside_fences
    assert "<a " not in outside_fences
    assert "\x00" not in text
    assert "\x1b" not in text
    assert "\\x1b[31mred" in text
    # What HTML remains is ours.
    assert set(re.findall(r"<(/?\w+)", outside_fences)) <= {"details", "/details", "summary",
                                                            "/summary"}  # fmt: skip


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("a|b", "a\\|b"),
        ("`code`", "\\`code\\`"),
        ("<b>&", "&lt;b&gt;&amp;"),
        ("**x** [l](u)", "\\*\\*x\\*\\* \\[l\\](u)"),
        ("two\nlines", "two⏎lines"),
        ("nul\x00", "nul\\\\x00"),  # the backslash shown, escaped for Markdown
        ("ask @octocat", "ask @\u200boctocat"),  # shown, but mentions nobody
    ],
    ids=["pipe", "backticks", "html", "emphasis-and-links", "newline", "nul", "mention"],
)
def test_inline_escapes(raw: str, shown: str) -> None:
    assert inline(raw) == shown


def test_a_fence_is_longer_than_any_backtick_run_inside() -> None:
    text = block("before\n````\nafter")
    assert text.startswith("`````\n")
    assert text.endswith("\n`````")


def test_a_huge_report_stays_under_the_pr_comment_limit(failing_report: Report) -> None:
    gates = list(failing_report.gates)
    golden = gates[2]
    many = tuple(golden.findings[0].model_copy(update={"probe": f"p{i}"}) for i in range(500))
    gates[2] = golden.model_copy(update={"findings": many})
    report = failing_report.model_copy(update={"gates": tuple(gates)})
    text = render_markdown(report, max_chars=20_000)
    assert len(text) <= 20_000
    assert "more blocking finding(s) in the JSON and HTML reports" in text


def test_hostile_text_survives_as_visible_characters(hostile: str) -> None:
    shown = inline(hostile)
    assert "document.title='pwned'" in shown
    assert "&lt;script&gt;" in shown


def test_a_passing_report_has_no_findings_section(passing_report: Report) -> None:
    text = render_markdown(passing_report)
    assert text.startswith("## servegate: ✅ PASS — ship it\n")
    assert "Findings that block" not in text


def test_a_commonmark_renderer_makes_no_element_from_server_text(failing_report: Report) -> None:
    from markdown_it import MarkdownIt  # rich's own Markdown parser: CommonMark with GFM tables

    html = MarkdownIt("commonmark").enable("table").render(render_markdown(failing_report))
    tags = set(re.findall(r"<([a-z0-9]+)", html))
    assert tags <= {"h2", "h3", "h4", "p", "strong", "ul", "li", "table", "thead", "tbody", "tr",
                    "th", "td", "pre", "code", "details", "summary"}  # fmt: skip
    assert html.count("<table>") == 4  # what changed, gates, correctness, drift
    assert "model smol &lt;script&gt;document.title='pwned'" in html
