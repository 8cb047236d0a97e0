"""Gate 3, golden prompts: behaviour users depend on still holds, judged relative to the baseline.

A probe regresses when the baseline passes it and the candidate fails it; both failing is
`baseline-fail` (reported, not blocking). Degeneration (a same-character run, abnormal characters,
empty output where the baseline had text) blocks whatever the assertions say.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from functools import cached_property

from servegate.config.models import GateConfig, Policy
from servegate.endpoints.types import Completion
from servegate.gates.evidence import curl, describe
from servegate.gates.pair import EndpointPair
from servegate.probes import (
    Probe,
    ProbeOutcome,
    Suite,
    check_probe,
    default_suite,
    load_suite,
)
from servegate.stats import PairedCounts, mcnemar_exact, wilson_interval
from servegate.stats.degeneration import degeneration_metrics, is_severe, punctuation_soup
from servegate.verdict.model import Finding, GateResult, Severity, Status

NAME = "golden"

ProgressFn = Callable[[int, int, str], None]

# Categories whose probes check machine-readable output: the "structured parse rate".
STRUCTURED_CATEGORIES = frozenset({"json", "tools"})


class ProbeStatus(StrEnum):
    PASS = "pass"
    REGRESSED = "regressed"
    BASELINE_FAIL = "baseline-fail"
    INCONCLUSIVE = "inconclusive"


@dataclass(frozen=True)
class Observation:
    probe: Probe
    baseline: Completion
    candidate: Completion

    # Judging, findings and the paired rates all need these: check the assertions once.
    @cached_property
    def baseline_passed(self) -> bool:
        return check_probe(self.probe, self.baseline, self.baseline).passed

    @cached_property
    def candidate_outcome(self) -> ProbeOutcome:
        return check_probe(self.probe, self.candidate, self.baseline)


@dataclass(frozen=True)
class GoldenEvidence:
    observations: tuple[Observation, ...]
    baseline_url: str
    candidate_url: str
    model: str | None


def select_probes(cfg: GateConfig) -> Suite:
    """The suite to run: the user's file or the shipped default, filtered by category."""
    suite = load_suite(cfg.suite) if cfg.suite is not None else default_suite()
    if cfg.categories is None:
        return suite
    wanted = set(cfg.categories)
    return suite.model_copy(
        update={"probes": tuple(p for p in suite.probes if p.category in wanted)}
    )


async def collect(
    pair: EndpointPair, cfg: GateConfig, *, progress: ProgressFn | None = None
) -> GoldenEvidence:
    """Send every probe to baseline then candidate, in suite order, each isolated."""
    probes = select_probes(cfg).probes
    observations = []
    for i, probe in enumerate(probes):
        if progress is not None:
            progress(i, len(probes), probe.id)
        b, c = await pair.both(
            probe.api, probe.request, gate=NAME, probe=probe.id, deadline_s=cfg.request_deadline_s
        )
        observations.append(Observation(probe, b, c))
    if progress is not None:
        progress(len(probes), len(probes), "")
    return GoldenEvidence(
        tuple(observations), pair.baseline.base_url, pair.candidate.base_url, pair.model
    )


def judge(obs: Observation) -> ProbeStatus:
    """Per-probe status relative to the baseline."""
    if obs.baseline.error is not None and obs.baseline.error.category not in ("rejected",):
        return ProbeStatus.INCONCLUSIVE
    if not obs.baseline_passed:
        return ProbeStatus.BASELINE_FAIL
    if obs.candidate_outcome.passed:
        return ProbeStatus.PASS
    return ProbeStatus.REGRESSED


def _body(obs: Observation, model: str | None) -> dict[str, object]:
    return {**obs.probe.request, **({"model": model} if model else {})}


def _finding(
    obs: Observation, ev: GoldenEvidence, category: str, severity: Severity, message: str
) -> Finding:
    return Finding(
        probe=obs.probe.id,
        category=category,
        severity=severity,
        side="candidate",
        message=message,
        baseline_excerpt=describe(obs.baseline),
        candidate_excerpt=describe(obs.candidate),
        curl=curl(ev.candidate_url, obs.probe.api, _body(obs, ev.model)),
    )


def _probe_findings(obs: Observation, status: ProbeStatus, ev: GoldenEvidence) -> list[Finding]:
    b, c = obs.baseline, obs.candidate
    out: list[Finding] = []
    if c.error is not None and b.error is None:
        return [
            _finding(
                obs,
                ev,
                str(c.error.category),
                Severity.CRITICAL,
                f"the candidate failed the request ({c.error.category}) that the baseline served",
            )
        ]
    deg_c, deg_b = degeneration_metrics(c.text), degeneration_metrics(b.text)
    severe_c = is_severe(deg_c) or punctuation_soup(deg_c, deg_b)
    if severe_c and not is_severe(deg_b):
        out.append(
            _finding(obs, ev, "degeneration", Severity.CRITICAL, f"degenerate output: {severe_c}")
        )
    elif b.text.strip() and not c.text.strip() and not c.tool_calls:
        out.append(
            _finding(
                obs,
                ev,
                "empty_output",
                Severity.CRITICAL,
                "empty output where the baseline answered with text",
            )
        )
    if status is ProbeStatus.REGRESSED:
        failed = obs.candidate_outcome.failures
        if out:  # degeneration already reported: do not count the same symptom twice
            failed = tuple(f for f in failed if not f.startswith("no-degeneration"))
        if failed:
            severity = Severity.CRITICAL if obs.probe.category == "canary" else Severity.MAJOR
            out.append(
                _finding(
                    obs, ev, obs.probe.category, severity, "regressed: " + "; ".join(failed)[:300]
                )
            )
    elif not out and b.ok and c.ok and b.text != c.text:
        out.append(
            _finding(
                obs,
                ev,
                "changed",
                Severity.INFO,
                "output differs from the baseline (judged against the noise floor "
                "by the numerics gate)",
            )
        )
    return out


def evaluate(ev: GoldenEvidence, policy: Policy) -> GateResult:
    """Judge every probe relative to the baseline; degeneration and hangs block."""
    statuses = [judge(o) for o in ev.observations]
    findings: list[Finding] = []
    for obs, probe_status in zip(ev.observations, statuses, strict=True):
        findings += _probe_findings(obs, probe_status, ev)
    metrics = _metrics(ev.observations, statuses)
    judged = sum(1 for s in statuses if s is not ProbeStatus.INCONCLUSIVE)
    canary_ok = _canaries_hold(ev.observations, statuses, policy)
    blocking = [f for f in findings if f.blocking]
    if not ev.observations or judged == 0:
        status, summary = Status.INCONCLUSIVE, "no probe could be judged"
    elif blocking or not canary_ok:
        status = Status.FAIL
        summary = f"{len(blocking)} blocking finding(s): " + "; ".join(
            f"{f.probe}: {f.message}" for f in blocking[:2]
        )
    else:
        status = Status.PASS
        summary = (
            f"{metrics['pass']} pass, {metrics['baseline_fail']} baseline-fail, "
            f"{metrics['changed']} changed, no regression"
        )
    return GateResult(
        name=NAME,
        status=status,
        summary=summary,
        metrics=metrics,
        findings=tuple(findings),
        details={
            "categories": category_rates(ev.observations),
            "probes": [
                {"probe": o.probe.id, "category": o.probe.category, "status": str(s)}
                for o, s in zip(ev.observations, statuses, strict=True)
            ],
        },
    )


def _canaries_hold(
    observations: Sequence[Observation], statuses: Sequence[ProbeStatus], policy: Policy
) -> bool:
    relevant = [
        s
        for o, s in zip(observations, statuses, strict=True)
        if o.probe.category == "canary" and s in (ProbeStatus.PASS, ProbeStatus.REGRESSED)
    ]
    if not relevant:
        return True
    rate = sum(1 for s in relevant if s is ProbeStatus.PASS) / len(relevant)
    return rate >= policy.canary_pass_rate


def _paired(observations: Sequence[Observation]) -> PairedCounts:
    """Pass/fail pairs over probes whose baseline request succeeded."""
    judged = [o for o in observations if o.baseline.ok]
    return PairedCounts.from_outcomes(
        [o.baseline_passed for o in judged],
        [o.candidate_outcome.passed for o in judged],
    )


def _rates(counts: PairedCounts) -> dict[str, float | int | str | bool | None]:
    """Pass rates with Wilson 95 % intervals and the exact McNemar p that the candidate is worse."""
    base_pass = counts.both_pass + counts.regressions
    cand_pass = counts.both_pass + counts.improvements
    b_ci, c_ci = wilson_interval(base_pass, counts.n), wilson_interval(cand_pass, counts.n)
    return {
        "n": counts.n,
        "baseline_rate": b_ci.rate,
        "baseline_ci": f"[{b_ci.low:.2f}, {b_ci.high:.2f}]",
        "candidate_rate": c_ci.rate,
        "candidate_ci": f"[{c_ci.low:.2f}, {c_ci.high:.2f}]",
        "regressions": counts.regressions,
        "improvements": counts.improvements,
        "mcnemar_p_candidate_worse": round(mcnemar_exact(counts).p_candidate_worse, 4),
    }


def category_rates(
    observations: Sequence[Observation],
) -> dict[str, dict[str, float | int | str | bool | None]]:
    """Per-category paired pass rates, plus the structured (json + tools) aggregate."""
    out = {}
    for category in sorted({o.probe.category for o in observations}):
        out[category] = _rates(_paired([o for o in observations if o.probe.category == category]))
    structured = [o for o in observations if o.probe.category in STRUCTURED_CATEGORIES]
    if structured:
        out["structured"] = _rates(_paired(structured))
    return out


def _metrics(
    observations: Sequence[Observation], statuses: Sequence[ProbeStatus]
) -> dict[str, float | int | str | bool | None]:
    count = {s: sum(1 for x in statuses if x is s) for s in ProbeStatus}
    deg_b = [degeneration_metrics(o.baseline.text) for o in observations]
    deg_c = [degeneration_metrics(o.candidate.text) for o in observations]
    both_ok = [o for o in observations if o.baseline.ok and o.candidate.ok]
    same = sum(1 for o in both_ok if o.baseline.text == o.candidate.text)
    return {
        "probes": len(observations),
        "pass": count[ProbeStatus.PASS],
        "regressed": count[ProbeStatus.REGRESSED],
        "baseline_fail": count[ProbeStatus.BASELINE_FAIL],
        "inconclusive": count[ProbeStatus.INCONCLUSIVE],
        "changed": len(both_ok) - same,
        "exact_match_rate": round(same / len(both_ok), 4) if both_ok else None,
        "baseline_errors": sum(1 for o in observations if not o.baseline.ok),
        "candidate_errors": sum(1 for o in observations if not o.candidate.ok),
        "baseline_severe_degeneration": sum(1 for m in deg_b if is_severe(m)),
        "candidate_severe_degeneration": sum(1 for m in deg_c if is_severe(m)),
        "candidate_longest_char_run": max((m.longest_char_run for m in deg_c), default=0),
        "candidate_max_abnormal_char_ratio": round(
            max((m.abnormal_char_ratio for m in deg_c), default=0.0), 4
        ),
        "candidate_max_repeated_ngram_ratio": round(
            max((m.repeated_ngram_ratio for m in deg_c), default=0.0), 4
        ),
        "candidate_empty_outputs": sum(1 for m in deg_c if m.empty),
    }
