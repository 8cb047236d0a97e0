"""JUnit XML: valid XML 1.0 whatever the model wrote; failures, skips and passes as judged."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from xml.parsers.expat import ExpatError, ParserCreate

import pytest

from servegate.reports.junit import render_junit
from servegate.verdict.model import Finding, Report, Severity


def _parse(text: str) -> ET.Element:
    # expat is a conforming XML 1.0 parser: it rejects NUL, control characters and surrogates.
    parser = ParserCreate("UTF-8")
    parser.Parse(text.encode("utf-8"), True)
    return ET.fromstring(text.encode("utf-8"))


def _cases(root: ET.Element, suite: str) -> dict[str, ET.Element]:
    found = root.find(f"testsuite[@name='servegate.{suite}']")
    assert found is not None
    return {c.get("name", ""): c for c in found.iter("testcase")}


def test_the_document_parses_although_the_model_wrote_nul_ansi_and_surrogates(
    failing_report: Report, hostile: str
) -> None:
    text = render_junit(failing_report)
    assert "\x00" not in text
    assert "\x1b" not in text
    root = _parse(text)
    system_out = " ".join(e.text or "" for e in root.iter("failure"))
    assert "\\x1b[31mred" in system_out
    assert "\\udc80" in system_out
    assert "<script>document.title='pwned'" in system_out  # shown as text, once
    assert hostile  # the fixture the report carries


def test_a_plain_xml_writer_would_have_produced_an_invalid_document(hostile: str) -> None:
    # The guard above is real: the same string put in naively is rejected by the parser.
    naive = f"<a>{hostile.replace('&', '&amp;').replace('<', '&lt;')}</a>"
    with pytest.raises(ExpatError):
        ParserCreate("UTF-8").Parse(naive.encode("utf-8", "surrogatepass"), True)


def test_each_check_is_a_testcase_with_its_outcome(failing_report: Report) -> None:
    root = _parse(render_junit(failing_report))
    numerics = _cases(root, "numerics")
    drift = numerics["dlogprob: mean |Δlogprob| on the common prefix"]
    failure = drift.find("failure")
    assert failure is not None
    assert failure.get("message") == "0.5 nats exceeds ≤ 0.2 nats"
    assert "policy key: noise_k" in (failure.text or "")
    ppl = numerics["perplexity_shift: perplexity shift on the reference texts"]
    skipped = ppl.find("skipped")
    assert skipped is not None
    assert skipped.get("message") == "not measured: no echo logprobs"


def test_each_probe_is_a_testcase_failed_by_its_blocking_findings(failing_report: Report) -> None:
    golden = _cases(_parse(render_junit(failing_report)), "golden")
    canary = golden["canary-ok"].find("failure")
    assert canary is not None
    assert "regressed: expected OK" in (canary.get("message") or "")
    assert "reproduce: curl -sS" in (canary.text or "")
    # baseline-fail is reported, not blocking; an unjudged probe is skipped, never a pass.
    assert golden["refusal"].find("failure") is None
    assert "baseline-fail" in (golden["refusal"].findtext("system-out") or "")
    skipped = golden["json-schema"].find("skipped")
    assert skipped is not None
    assert "refused json_schema" in (skipped.get("message") or "")
    assert [e.tag for e in golden["chinese"]] == ["system-out"]
    assert golden["chinese"].findtext("system-out") == "status: pass"


def test_a_blocking_divergence_fails_its_probe(failing_report: Report) -> None:
    numerics = _cases(_parse(render_junit(failing_report)), "numerics")
    assert numerics["n-1"].find("failure") is not None
    assert numerics["n-2"].find("failure") is None  # near-tie: explained, not blocking


def test_a_gate_without_checks_is_one_skipped_testcase(failing_report: Report) -> None:
    context = _cases(_parse(render_junit(failing_report)), "context")
    assert list(context) == ["gate"]
    skipped = context["gate"].find("skipped")
    assert skipped is not None
    assert skipped.get("message") == "skip: not run"


def test_counts_add_up(failing_report: Report) -> None:
    root = _parse(render_junit(failing_report))
    suites = root.findall("testsuite")
    for element in [root, *suites]:
        cases = list(element.iter("testcase"))
        assert int(element.get("tests", "-1")) == len(cases)
        assert int(element.get("failures", "-1")) == sum(c.find("failure") is not None
                                                          for c in cases)  # fmt: skip
        assert int(element.get("skipped", "-1")) == sum(c.find("skipped") is not None
                                                         for c in cases)  # fmt: skip
    assert root.get("failures") == "7"
    assert (root.get("name") or "").startswith("servegate run 0123456789ab: fail")


def test_a_probe_name_with_control_bytes_is_an_escaped_attribute(failing_report: Report) -> None:
    gates = list(failing_report.gates)
    odd = Finding(probe="p\x00\x1b[2J\ud800", category="c", severity=Severity.MAJOR, message="m")
    gates[2] = gates[2].model_copy(update={"findings": (odd,)})
    root = _parse(render_junit(failing_report.model_copy(update={"gates": tuple(gates)})))
    assert "p\\x00\\x1b[2J\\ud800" in _cases(root, "golden")
