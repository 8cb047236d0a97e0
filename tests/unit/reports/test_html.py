"""The HTML report: self-contained, escaped exactly once, every section from the one report."""

from __future__ import annotations

import base64
import hashlib
import json
import re
from html.parser import HTMLParser

from servegate.reports.html import CSP, CSS, embedded_json, render_html
from servegate.verdict.model import Report

SCRIPT = "<script>document.title='pwned'</script>"


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.data: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.data.append(data)


def _parse(page: str) -> _Tags:
    parser = _Tags()
    parser.feed(page)
    parser.close()
    return parser


def test_the_verdict_comes_first(failing_report: Report) -> None:
    page = render_html(failing_report)
    body = page.split("<body>", 1)[1]
    assert body.lstrip().startswith('<header class="verdict fail"><h1>servegate: FAIL — roll back')


def test_model_output_becomes_no_element_and_no_attribute(failing_report: Report) -> None:
    tags = _parse(render_html(failing_report)).tags
    names = {t for t, _ in tags}
    assert "img" not in names
    assert "a" in names  # our own navigation links only:
    hrefs = [a.get("href") or "" for t, a in tags if t == "a"]
    assert all(h.startswith("#") for h in hrefs), hrefs
    assert [a for t, a in tags if t == "script"] == [
        {"type": "application/json", "id": "servegate-report"}
    ]
    handlers = [(t, k) for t, a in tags for k in a if k.startswith("on")]
    assert handlers == []


def test_text_is_escaped_exactly_once(failing_report: Report) -> None:
    page = render_html(failing_report)
    assert "&lt;script&gt;document.title=&#x27;pwned&#x27;" in page
    assert "&amp;lt;" not in page
    assert "&amp;#x27;" not in page
    # Read back by a parser, the text is the original characters.
    text = "".join(_parse(page).data)
    assert "<script>document.title='pwned';window.__pwned=1</script>" in text
    assert "ESC\\x1b[31mred" in text
    assert "\x1b" not in page
    assert "\x00" not in page


def test_the_page_sets_a_strict_csp_that_allows_only_its_own_stylesheet() -> None:
    digest = base64.b64encode(hashlib.sha256(CSS.encode()).digest()).decode()
    assert f"style-src 'sha256-{digest}'" in CSP
    assert "default-src 'none'" in CSP
    assert "script-src 'none'" in CSP
    assert "unsafe" not in CSP


def test_the_page_loads_nothing_from_anywhere(failing_report: Report) -> None:
    tags = _parse(render_html(failing_report)).tags
    assert not [a for _, a in tags if "src" in a or ("href" in a and not (a["href"] or "#")
                                                     .startswith("#"))]  # fmt: skip
    meta = [a for t, a in tags if t == "meta" and a.get("http-equiv") == "Content-Security-Policy"]
    assert meta == [{"http-equiv": "Content-Security-Policy", "content": CSP}]


def test_the_embedded_json_cannot_end_its_block_and_holds_the_report(
    passing_report: Report,
) -> None:
    hostile_name = "</script><b>&amp;\u2028"
    fp = passing_report.candidate.model_copy(update={"model": hostile_name, "version": None})
    report = passing_report.model_copy(update={"candidate": fp})
    data = embedded_json(report)
    assert "<" not in data
    assert ">" not in data
    assert "&" not in data
    assert Report.model_validate(json.loads(data)) == report


def test_a_lone_surrogate_in_the_embedded_json_becomes_a_replacement_character(
    failing_report: Report,
) -> None:
    data = json.loads(embedded_json(failing_report))
    assert "lone\ufffd" in data["candidate"]["version"]


def test_a_lone_surrogate_does_not_break_the_page(failing_report: Report) -> None:
    odd = failing_report.model_copy(update={"reason": "failed \udc80"})
    page = render_html(odd)
    assert "failed \\udc80" in page
    page.encode("utf-8")  # strict: raises on a surrogate


def test_latency_cdf_only_from_timings_given(failing_report: Report) -> None:
    without = render_html(failing_report)
    assert "No per-request timings" in without
    assert "<polyline" not in without
    page = render_html(failing_report, latencies_ms={"baseline": [10.0, 20.0],
                                                     "candidate": [11.0, 40.0, 90.0]})  # fmt: skip
    assert page.count("<polyline") == 2
    assert "candidate (n=3)" in page
    assert "No per-request timings" not in page


def test_drift_plot_has_a_point_per_divergence_and_marks_the_blocking_one(
    failing_report: Report,
) -> None:
    page = render_html(failing_report)
    assert page.count('<circle class="point-blocking"') == 1
    assert page.count('<circle class="point"') == 1


def test_first_divergence_is_marked_in_both_texts(failing_report: Report) -> None:
    page = render_html(failing_report)
    assert "<pre><mark>OK</mark></pre>" in page
    assert "<pre>{&quot;city&quot;: &quot;<mark>Paris" in page
    assert "first difference at character 10" in page


def test_sections_say_what_the_report_does_not_hold(passing_report: Report) -> None:
    page = render_html(passing_report)
    assert "performance was not measured in this run" in page
    assert "The report holds no A/A noise floor" in page
    assert "The report records no divergence." in page
    assert "No blocking finding has a reproducer." in page


def test_noise_floor_environment_and_reproducers_are_shown(failing_report: Report) -> None:
    page = render_html(failing_report)
    noise = page.split('id="noise"')[1].split("</section>")[0]
    assert re.findall(r"<td>(aa_[a-z_]+)</td>", noise) == [
        "aa_source", "aa_exact_match_rate", "aa_mean_abs_dlogprob_nats", "aa_prefix_cache_flip_rate"
    ]  # fmt: skip
    env = page.split('id="environment"')[1].split("</section>")[0]
    assert "<td>quant</td><td>Q4_1</td><td>-</td>" in env
    repro = page.split('id="reproduce"')[1].split("</section>")[0]
    assert repro.count('<pre class="curl">') == 2


def test_server_gauges_under_load_are_shown_escaped_beside_the_performance_checks(
    passing_report: Report,
) -> None:
    from servegate.verdict.judgement import check, gate_result
    from servegate.verdict.model import EvidenceRow

    perf = gate_result(
        "performance",
        [check("ttft_ms", "TTFT P95, candidate / baseline", failed=False, ratio="1.01×")],
    )
    report = passing_report.model_copy(
        update={
            "gates": (perf,),
            "performance_evidence": (
                EvidenceRow(metric="server requests waiting", gate="performance",
                            baseline="mean 0.5, max 3 (vllm:num_requests_waiting, 9 scrapes)",
                            candidate=f"not measured: GET /metrics answered {SCRIPT}",
                            definition="requests the server kept waiting"),
            )
        }
    )  # fmt: skip
    page = render_html(report)
    text = "".join(_parse(page).data)
    scripts = [a for t, a in _parse(page).tags if t == "script"]
    assert scripts == [{"type": "application/json", "id": "servegate-report"}]
    assert "Under load, not judged:" in text
    assert "mean 0.5, max 3 (vllm:num_requests_waiting, 9 scrapes)" in text
    assert f"not measured: GET /metrics answered {SCRIPT}" in text  # as text, not an element
    assert "&lt;script&gt;" in page
