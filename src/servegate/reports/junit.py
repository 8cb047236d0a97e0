"""JUnit XML rendered from the one `Report`: a testsuite per gate, a testcase per check and probe.

CI systems read JUnit to show what failed. A check that failed, and a probe with a blocking
finding (or a divergence the gate judged blocking), is a `<failure>`; a check that could not be
measured, and a probe the gate could not judge, is `<skipped>` with the reason — never a pass.
A gate that made no checks at all (skipped, or cut by the run deadline) is one testcase with its
status. Nothing is judged here. Server text passes through `plain` first, so the document is
valid XML 1.0 whatever bytes the model produced.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass, field

from servegate.endpoints.text import clip
from servegate.reports.plain import plain
from servegate.verdict.model import (
    Check,
    Divergence,
    Finding,
    GateResult,
    Outcome,
    Report,
    Status,
)

TEXT_CHARS = 2_000


@dataclass
class _Probe:
    name: str
    status: str | None = None
    why: str = ""
    findings: list[Finding] = field(default_factory=list)
    divergences: list[Divergence] = field(default_factory=list)

    @property
    def blocking(self) -> list[str]:
        return [f"{f.category}: {f.message}" for f in self.findings if f.blocking] + [
            f"divergence at token {d.token_index}: {d.explanation}"
            for d in self.divergences
            if d.blocking
        ]


def _probes(gate: GateResult) -> list[_Probe]:
    """Every probe the gate names (its per-probe details, findings, divergences), in order."""
    probes: dict[str, _Probe] = {}
    rows = gate.details.get("probes")
    for row in rows if isinstance(rows, list) else []:
        if isinstance(row, dict) and "probe" in row:
            name = str(row["probe"])
            status = str(row.get("status") or "") or None
            probes[name] = _Probe(name, status, str(row.get("why") or ""))
    for f in gate.findings:
        probes.setdefault(f.probe, _Probe(f.probe)).findings.append(f)
    for d in gate.divergences:
        probes.setdefault(d.probe, _Probe(d.probe)).divergences.append(d)
    return list(probes.values())


def _text(value: object) -> str:
    return clip(plain(value), TEXT_CHARS)


def _finding_text(f: Finding) -> str:
    lines = [f"[{f.severity.value}] {f.category}: {f.message}"]
    if f.side:
        lines.append(f"side: {f.side}")
    for label, text in (("baseline", f.baseline_excerpt), ("candidate", f.candidate_excerpt)):
        if text is not None:
            lines.append(f"{label}: {text}")
    if f.curl:
        lines.append(f"reproduce: {f.curl}")
    return "\n".join(lines)


def _divergence_text(d: Divergence) -> str:
    return (
        f"divergence at token {d.token_index}: {d.baseline_token!r} -> {d.candidate_token!r}, "
        f"margin {d.margin_nats} nats, gap {d.gap_nats} nats: {d.explanation}"
        + (f" ({d.note})" if d.note else "")
    )


def _case(suite: ET.Element, classname: str, name: str) -> ET.Element:
    return ET.SubElement(suite, "testcase", classname=_text(classname), name=_text(name), time="0")


def _add(case: ET.Element, tag: str, message: str, text: str = "") -> None:
    child = ET.SubElement(case, tag, message=clip(plain(message, one_line=True), 500))
    if tag == "failure":
        child.set("type", "servegate")
    if text:
        child.text = _text(text)


def _check_case(suite: ET.Element, gate: str, c: Check) -> str:
    case = _case(suite, f"servegate.{gate}.checks", f"{c.name}: {c.title}")
    detail = f"candidate: {c.candidate}\nbaseline: {c.baseline}\nlimit: {c.limit}" + (
        f"\npolicy key: {c.policy_key}" if c.policy_key else ""
    )
    if c.outcome is Outcome.FAIL:
        _add(case, "failure", c.reason or c.title, detail)
    elif c.outcome is Outcome.NOT_MEASURED:
        _add(case, "skipped", f"not measured: {c.reason or c.title}")
    elif c.outcome is Outcome.NOT_APPLICABLE:
        _add(case, "skipped", f"not applicable: {c.reason or c.title}")
    else:
        ET.SubElement(case, "system-out").text = _text(detail)
    return c.outcome.value


def _probe_case(suite: ET.Element, gate: str, p: _Probe) -> str:
    case = _case(suite, f"servegate.{gate}.probes", p.name)
    evidence = [_finding_text(f) for f in p.findings] + [_divergence_text(d) for d in p.divergences]
    if p.blocking:
        _add(case, "failure", "; ".join(p.blocking), "\n\n".join(evidence))
        return "fail"
    if p.status == "inconclusive":
        _add(case, "skipped", f"not judged: {p.why or 'inconclusive'}")
        return "skip"
    out = [f"status: {p.status}" + (f" ({p.why})" if p.why else "")] if p.status else []
    if out or evidence:
        ET.SubElement(case, "system-out").text = _text("\n\n".join(out + evidence))
    return "pass"


def _gate_case(suite: ET.Element, gate: GateResult) -> str:
    case = _case(suite, f"servegate.{gate.name}", "gate")
    if gate.status is Status.FAIL:
        _add(case, "failure", gate.summary)
        return "fail"
    if gate.status is not Status.PASS:
        _add(case, "skipped", f"{gate.status.value}: {gate.summary}")
        return "skip"
    return "pass"


def _suite(root: ET.Element, gate: GateResult) -> list[str]:
    seconds = f"{gate.time.seconds:.3f}" if gate.time is not None else "0"
    suite = ET.SubElement(root, "testsuite", name=f"servegate.{_text(gate.name)}", time=seconds)
    props = ET.SubElement(suite, "properties")
    for key, value in (("status", gate.status.value), ("summary", gate.summary)):
        ET.SubElement(props, "property", name=key, value=_text(value))
    outcomes = [_check_case(suite, gate.name, c) for c in gate.checks]
    outcomes += [_probe_case(suite, gate.name, p) for p in _probes(gate)]
    if not gate.checks:
        outcomes.append(_gate_case(suite, gate))
    _count(suite, outcomes)
    return outcomes


def _count(element: ET.Element, outcomes: list[str]) -> None:
    element.set("tests", str(len(outcomes)))
    element.set("failures", str(outcomes.count("fail")))
    element.set("errors", "0")
    element.set("skipped", str(outcomes.count("skip") + outcomes.count("not-measured")))


def render_junit(report: Report) -> str:
    """The report as a JUnit XML document (UTF-8, XML 1.0)."""
    title = f"servegate run {report.run_id}: {report.verdict.value} ({report.reason})"
    root = ET.Element("testsuites", name=clip(plain(title, one_line=True), 500))
    root.set("time", f"{report.duration_s:.3f}")
    outcomes = [o for gate in report.gates for o in _suite(root, gate)]
    _count(root, outcomes)
    ET.indent(root)
    body = ET.tostring(root, encoding="unicode")
    return f'<?xml version="1.0" encoding="UTF-8"?>\n{body}\n'
