"""The first answers: the suite's canaries on both sides, as soon as both are ready.

A server can start, answer HTTP 200 at normal latency and still return garbage (vLLM 0.25.0
answered `!!!!!!!!!!!!!!!!` for `Reply with exactly: OK`). Gate 1 sends the default suite's
canary probes once to each side, plainly (greedy, as written in the suite), and a candidate
whose answer is severely degenerate where the baseline's is not
(`servegate.endpoints.answers.degenerate_relative`) fails Gate 1 with a critical finding — the
run then fails fast, minutes before the golden gate would send the same probes again. A
baseline that degenerates itself, or a side that errs, judges nothing here (the golden gate
judges those); the check is then not measured, never a pass.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from servegate.config.models import GateConfig
from servegate.endpoints.answers import degenerate_relative
from servegate.endpoints.types import Completion
from servegate.gates.evidence import curl, describe
from servegate.gates.pair import EndpointPair
from servegate.probes import Probe, default_suite
from servegate.verdict.judgement import check, not_measured
from servegate.verdict.model import Check, Finding, Severity

CATEGORY = "canary"
MAX_PROBES = 3  # enough to see a broken kernel, cheap beside Gate 1's other requests
TITLE = "the first answers are not degenerate where the baseline's are not (canary probes)"


@dataclass(frozen=True)
class CanaryAnswer:
    """One canary probe answered by both sides."""

    probe: Probe
    body: dict[str, Any]  # as sent
    baseline: Completion
    candidate: Completion


def canary_probes() -> tuple[Probe, ...]:
    """The shipped suite's first canaries (the golden gate's own probes)."""
    return tuple(p for p in default_suite().probes if p.category == CATEGORY)[:MAX_PROBES]


async def collect_canaries(
    pair: EndpointPair, cfg: GateConfig, gate: str
) -> tuple[CanaryAnswer, ...]:
    """Each canary once to both sides (at once where the pair allows it)."""
    out = []
    for probe in canary_probes():
        body = pair.body(probe.request)
        b, c = await pair.both(
            probe.api,
            body,
            gate=gate,
            probe=f"canary:{probe.id}",
            deadline_s=cfg.request_deadline_s,
        )
        out.append(CanaryAnswer(probe, body, b, c))
    return tuple(out)


def judge_canaries(
    answers: tuple[CanaryAnswer, ...], candidate_url: str
) -> tuple[list[Check], list[Finding]]:
    """The check and a critical finding per canary the candidate degenerates on."""
    judged = [a for a in answers if a.baseline.ok and a.candidate.ok]
    if not judged:
        why = "no canary was answered by both sides" if answers else "no canary probe was sent"
        return [not_measured("canary_answers", TITLE, why)], []
    findings = []
    for a in judged:
        found = degenerate_relative(a.candidate.text, a.baseline.text)
        if found is None:
            continue
        kind, why = found
        findings.append(
            Finding(
                probe=a.probe.id,
                category="degeneration",
                severity=Severity.CRITICAL,
                side="candidate",
                message=f"degenerate first answer ({kind}: {why})",
                baseline_excerpt=describe(a.baseline),
                candidate_excerpt=describe(a.candidate),
                curl=curl(candidate_url, a.probe.api, a.body),
            )
        )
    made = check(
        "canary_answers",
        TITLE,
        failed=bool(findings),
        baseline=f"{len(judged)} answered",
        candidate=f"{len(findings)} of {len(judged)} degenerate",
        limit="0 degenerate where the baseline's is not",
        reason="; ".join(f.message for f in findings)[:300],
    )
    return [made], findings
