"""How one golden probe is judged: relative to the baseline, and against the baseline's own noise.

Each probe is answered five times: the baseline plainly, streamed, and again along its cache-hit
path; the candidate plainly and streamed. A probe is *unstable* when the baseline's own answer
changes along its paths: a candidate change there is within noise. Where the candidate's answer
left the baseline's at a near-tie of the baseline (logprobs on the plain answers), the change is
*explained* drift, not a regression. Only what is left is a regression.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from functools import cached_property

from servegate.endpoints.answers import degenerate_relative, same_answer
from servegate.endpoints.errors import ErrorCategory
from servegate.endpoints.types import Completion
from servegate.gates.batching import Batching
from servegate.gates.golden.responses import ResponsesEvidence
from servegate.gates.pair import timed_out
from servegate.gates.tokens import TokenComparison, compare
from servegate.probes import Probe, ProbeOutcome, check_probe
from servegate.stats.degeneration import degeneration_metrics, severe_kind

NAME = "golden"
# The answers of one probe, in the order they are collected.
RUNS = ("baseline", "baseline-stream", "baseline-hit", "candidate", "candidate-stream")
# The cache hit's placeholder while no probe needs the baseline's noise (`needs_noise`).
HIT_NOT_SENT = (
    "not needed: no candidate answer could be judged differently with the baseline's noise "
    "(baseline_paths: always sends it)"
)


class ProbeStatus(StrEnum):
    PASS = "pass"
    REGRESSED = "regressed"  # the baseline passes, the candidate fails: blocking
    WITHIN_NOISE = "within-noise"  # regressed, but the baseline's own paths change this probe
    EXPLAINED = "explained"  # regressed after a near-tie flip of the baseline (drift explained)
    BASELINE_FAIL = "baseline-fail"
    INCONCLUSIVE = "inconclusive"  # not measured on this probe


@dataclass(frozen=True)
class ProbeObservation:
    """The five answers of one probe (see RUNS)."""

    probe: Probe
    baseline: Completion
    baseline_stream: Completion
    baseline_hit: Completion
    candidate: Completion
    candidate_stream: Completion

    @cached_property
    def baseline_passed(self) -> bool:
        return check_probe(self.probe, self.baseline, self.baseline).passed

    @cached_property
    def candidate_outcome(self) -> ProbeOutcome:
        return check_probe(self.probe, self.candidate, self.baseline)

    @cached_property
    def stream_outcomes(self) -> tuple[bool, bool] | None:
        """(baseline, candidate) streamed answers passing, each against the baseline's stream."""
        b, c = self.baseline_stream, self.candidate_stream
        if not (b.ok and c.ok):
            return None
        return check_probe(self.probe, b, b).passed, check_probe(self.probe, c, b).passed

    @property
    def unstable(self) -> list[str]:
        """The baseline's own paths on which its answer changed (empty: stable, as far as seen)."""
        runs = (("streamed", self.baseline_stream), ("cache hit", self.baseline_hit))
        return [name for name, r in runs if r.ok and not same_answer(r, self.baseline)]

    @property
    def hit_not_sent(self) -> bool:
        """The cache hit was held back: no probe needed the baseline's noise (`needs_noise`)."""
        error = self.baseline_hit.error
        return error is not None and error.message == HIT_NOT_SENT

    @property
    def stream_mismatch(self) -> tuple[bool, bool] | None:
        """(baseline, candidate): the streamed answer differs from the plain one."""
        runs = (self.baseline, self.baseline_stream, self.candidate, self.candidate_stream)
        if not all(r.ok for r in runs):
            return None
        return (
            not same_answer(self.baseline, self.baseline_stream),
            not same_answer(self.candidate, self.candidate_stream),
        )

    def tokens(self) -> TokenComparison | None:
        """The plain answers compared token by token, when both came with logprobs."""
        b, c = self.baseline.logprobs, self.candidate.logprobs
        if not (self.baseline.ok and self.candidate.ok) or not b or not c:
            return None
        return compare(self.probe.id, b, c)

    @property
    def hung(self) -> list[str]:
        """Candidate runs that timed out (after the scaled deadline and one retry)."""
        runs = (("plain", self.candidate), ("streamed", self.candidate_stream))
        return [name for name, r in runs if timed_out(r)]


def needs_noise(obs: ProbeObservation) -> bool:
    """Whether the probe's judgement can depend on the baseline's own noise — its cache-hit
    answer, and the near-tie limit, degeneration kinds and allowance drawn from all of them.
    It can where the candidate fails a probe the baseline passes (within noise? explained?),
    fails when streamed where the baseline's stream passes, streams an answer different from
    its plain one where the baseline's does not, or writes a degenerate answer that is not the
    baseline's own. Anywhere else the noise is never read, whatever it is."""
    if obs.baseline_passed and not obs.candidate_outcome.passed:
        return True
    if obs.stream_outcomes == (True, False) or obs.stream_mismatch == (False, True):
        return True
    for c, b in ((obs.candidate, obs.baseline), (obs.candidate_stream, obs.baseline_stream)):
        if not (c.ok and b.ok) or same_answer(c, b):
            continue
        if severe_kind(degeneration_metrics(c.text)) or degenerate_relative(c.text, b.text):
            return True
    return False


@dataclass(frozen=True)
class Judged:
    obs: ProbeObservation
    status: ProbeStatus
    why: str = ""  # what made it within noise / explained / inconclusive
    tokens: TokenComparison | None = None


def judge(obs: ProbeObservation, tie_nats: float) -> Judged:
    """Per-probe status relative to the baseline, with the baseline's noise taken into account."""
    b, c = obs.baseline, obs.candidate
    if b.error is not None and b.error.category is not ErrorCategory.REJECTED:
        return Judged(obs, ProbeStatus.INCONCLUSIVE, f"baseline {b.error.category}")
    if not obs.baseline_passed:
        return Judged(obs, ProbeStatus.BASELINE_FAIL)
    if c.error is not None and (timed_out(c) or c.error.category is ErrorCategory.NOT_SENT):
        return Judged(obs, ProbeStatus.INCONCLUSIVE, f"candidate {c.error.category}")
    if obs.candidate_outcome.passed:
        return Judged(obs, ProbeStatus.PASS)
    if obs.unstable:
        why = f"the baseline's own answer changes when {' and '.join(obs.unstable)}"
        return Judged(obs, ProbeStatus.WITHIN_NOISE, why)
    cmp = obs.tokens()
    if cmp is not None and cmp.gap_nats is not None and cmp.gap_nats <= tie_nats:
        why = (
            f"the answer hinges on a near-tie at token {cmp.first_divergence}: the baseline's "
            f"top-1 was {cmp.gap_nats:.2f} nats above the candidate's token (limit {tie_nats:.2f})"
        )
        return Judged(obs, ProbeStatus.EXPLAINED, why, cmp)
    return Judged(obs, ProbeStatus.REGRESSED, "", cmp)


def self_flips(observations: Sequence[ProbeObservation]) -> list[TokenComparison]:
    """The baseline's plain answer against its cache-hit answer, per probe with logprobs: the
    golden gate's own sample of the baseline's path noise."""
    out = []
    for o in observations:
        a, h = o.baseline, o.baseline_hit
        if a.ok and h.ok and a.logprobs and h.logprobs:
            out.append(compare(o.probe.id, a.logprobs, h.logprobs))
    return out


@dataclass(frozen=True)
class GoldenEvidence:
    """Every probe's five answers, and where they came from."""

    observations: tuple[ProbeObservation, ...]
    baseline_url: str
    candidate_url: str
    model: str | None
    logprobs: bool = False  # plain requests asked for top-k logprobs (the baseline returns them)
    # The Responses API prompts (golden_responses); None when they were not sent.
    responses: ResponsesEvidence | None = None
    # Probes in flight at once on each side, and each side's batching measurement (none when
    # `golden_concurrency` was set).
    concurrency: int = 1
    batching: tuple[Batching, ...] = ()
