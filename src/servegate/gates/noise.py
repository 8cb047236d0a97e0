"""How two answers to the same request disagree, and the A/A floor: the baseline against itself.

The baseline answers the numerics prompts twice (and a replica once, when given) under the same
sequence discipline as the comparison: the same requests in the same order, each isolated. The
measures here (token comparison, cross-NLL, cosine, non-finite values) are the ones the numerics
gate applies to baseline versus candidate, so a candidate is only blamed for drift the baseline
does not show against itself.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from servegate.endpoints.errors import ErrorCategory
from servegate.endpoints.protocol import Endpoint
from servegate.endpoints.types import Completion, TokenLogprob
from servegate.gates.pair import Api, EndpointPair
from servegate.stats.distribution import DistributionSummary
from servegate.stats.noise import first_divergence

NAME = "numerics"


@dataclass(frozen=True, slots=True)
class ProbeRequest:
    """One numerics probe as sent to every side."""

    probe: str
    api: Api
    body: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class TokenComparison:
    """Greedy tokens of a reference side (`a`) against another side (`b`) for one probe."""

    probe: str
    tokens_a: int
    tokens_b: int
    first_divergence: int | None  # token index; None when the sequences are equal
    margin_nats: float | None  # a's top-1 minus top-2 at the divergence
    gap_nats: (
        float | None
    )  # a's top-1 minus a's logprob of b's token there (a lower bound if unseen)
    b_token_in_top: bool | None  # whether b's token is among a's top-k at the divergence
    topk_jaccard: float | None  # mean Jaccard of the top-k token sets over the common prefix
    mean_abs_dlogprob: (
        float | None
    )  # mean |logprob_a - logprob_b| of the chosen tokens, common prefix
    max_abs_dlogprob: float | None

    @property
    def exact(self) -> bool:
        return self.first_divergence is None


def ranked(entry: TokenLogprob) -> list[tuple[str, float]]:
    """The top-k alternatives of one position, best first, one value per token string."""
    best: dict[str, float] = {}
    for token, logprob in (*entry.top, (entry.token, entry.logprob)):
        best[token] = max(logprob, best.get(token, -math.inf))
    return sorted(best.items(), key=lambda item: item[1], reverse=True)


def margin_nats(entry: TokenLogprob) -> float | None:
    """Top-1 minus top-2 logprob at one position; None with fewer than two alternatives."""
    top = ranked(entry)
    return top[0][1] - top[1][1] if len(top) >= 2 else None


def _gap(entry: TokenLogprob, other: str) -> tuple[float | None, bool | None]:
    top = ranked(entry)
    if len(top) < 2:
        return None, None
    seen = dict(top)
    if other in seen:
        return top[0][1] - seen[other], True
    # Outside the top-k: its logprob is at most the k-th value, so the gap is at least this.
    return top[0][1] - top[-1][1], False


def compare(probe: str, a: Sequence[TokenLogprob], b: Sequence[TokenLogprob]) -> TokenComparison:
    """Compare two greedy token sequences with their logprobs, `a` being the reference."""
    div = first_divergence([t.token for t in a], [t.token for t in b])
    common = len(a) if div is None else div
    deltas = [abs(x.logprob - y.logprob) for x, y in zip(a[:common], b[:common], strict=True)]
    jaccards = [
        len(sa & sb) / len(sa | sb)
        for x, y in zip(a[:common], b[:common], strict=True)
        if x.top and y.top
        for sa, sb in [({t for t, _ in x.top}, {t for t, _ in y.top})]
    ]
    margin = gap = None
    in_top = None
    if div is not None and div < len(a) and div < len(b):
        margin = margin_nats(a[div])
        gap, in_top = _gap(a[div], b[div].token)
    return TokenComparison(
        probe=probe,
        tokens_a=len(a),
        tokens_b=len(b),
        first_divergence=div,
        margin_nats=margin,
        gap_nats=gap,
        b_token_in_top=in_top,
        topk_jaccard=sum(jaccards) / len(jaccards) if jaccards else None,
        mean_abs_dlogprob=sum(deltas) / len(deltas) if deltas else None,
        max_abs_dlogprob=max(deltas) if deltas else None,
    )


def token_pair(
    a: Completion, b: Completion
) -> tuple[tuple[TokenLogprob, ...], tuple[TokenLogprob, ...]] | None:
    """Both sides' tokens with logprobs; None unless both answered and both returned logprobs."""
    if not (a.ok and b.ok) or a.logprobs is None or b.logprobs is None:
        return None
    return a.logprobs, b.logprobs


@dataclass(frozen=True, slots=True)
class CrossScore:
    """Mean NLL per token (nats) of each side's generated text under each side, same context."""

    baseline_on_baseline: float | None
    baseline_on_candidate: float | None
    candidate_on_candidate: float | None
    candidate_on_baseline: float | None

    @property
    def excess_nats(self) -> float | None:
        """How much less likely the baseline finds the candidate's text than its own."""
        b, c = self.baseline_on_baseline, self.baseline_on_candidate
        return None if b is None or c is None else c - b


def tail_nll(entries: Sequence[TokenLogprob | None] | None, text: str) -> float | None:
    """Mean NLL per token of the echoed tokens that spell the final `text`; None if unknown."""
    if not entries or not text:
        return None
    covered, values = 0, []
    for entry in reversed(entries):
        if covered >= len(text):
            break
        if entry is None or not math.isfinite(entry.logprob):
            return None
        values.append(-entry.logprob)
        covered += len(entry.token)
    return sum(values) / len(values) if covered >= len(text) else None


def non_finite(c: Completion) -> bool:
    """NaN or infinity in any logprob (the HTTP client reports them as an error category)."""
    if c.error is not None:
        return c.error.category == ErrorCategory.NON_FINITE_LOGPROB
    entries = [*(c.logprobs or ()), *(e for e in c.prompt_logprobs or () if e is not None)]
    return not all(math.isfinite(v) for e in entries for v in (e.logprob, *(x for _, x in e.top)))


def cosine(u: Sequence[float], v: Sequence[float]) -> float:
    """Cosine similarity; 0 when either vector has zero norm or the dimensions differ."""
    nu, nv = math.sqrt(sum(x * x for x in u)), math.sqrt(sum(x * x for x in v))
    if len(u) != len(v) or not nu or not nv:
        return 0.0
    return sum(x * y for x, y in zip(u, v, strict=True)) / (nu * nv)


@dataclass(frozen=True)
class NoiseFloor:
    """Baseline-versus-itself drift of the numerics probes; `zero()` when none was measured."""

    source: str  # "none", "same-endpoint", "replica" or "same-endpoint+replica"
    comparisons: tuple[TokenComparison, ...]
    latency_spread: DistributionSummary  # |e2el_a - e2el_b| / max, per A/A pair

    @classmethod
    def zero(cls) -> NoiseFloor:
        """No A/A data: drift is judged against the absolute epsilon alone (and reported so)."""
        return cls("none", (), DistributionSummary.from_values(()))

    @property
    def measured(self) -> bool:
        return bool(self.comparisons)

    @property
    def exact_match_rate(self) -> float | None:
        n = len(self.comparisons)
        return sum(c.exact for c in self.comparisons) / n if n else None

    @property
    def divergence(self) -> DistributionSummary:
        """First-divergence token indices of the A/A pairs that differed."""
        return DistributionSummary.from_values(
            c.first_divergence for c in self.comparisons if c.first_divergence is not None
        )

    @property
    def tie_gap_nats(self) -> float:
        """The largest gap at which the baseline flipped against itself: benign by definition."""
        return max((c.gap_nats for c in self.comparisons if c.gap_nats is not None), default=0.0)

    @property
    def flip_rate(self) -> float:
        """Share of A/A pairs that diverged at all: the floor for confident disagreements."""
        n = len(self.comparisons)
        return sum(not c.exact for c in self.comparisons) / n if n else 0.0

    @property
    def mean_abs_dlogprob(self) -> float:
        values = [c.mean_abs_dlogprob for c in self.comparisons if c.mean_abs_dlogprob is not None]
        return sum(values) / len(values) if values else 0.0

    @property
    def min_topk_jaccard(self) -> float | None:
        values = [c.topk_jaccard for c in self.comparisons if c.topk_jaccard is not None]
        return min(values, default=None)

    def metrics(self) -> dict[str, float | int | str | None]:
        """The floor as report metrics (prefixed `aa_`)."""
        div = self.divergence
        return {
            "aa_source": self.source,
            "aa_pairs": len(self.comparisons),
            "aa_exact_match_rate": self.exact_match_rate,
            "aa_first_divergence_p50": div.p50,
            "aa_mean_abs_dlogprob_nats": self.mean_abs_dlogprob if self.measured else None,
            "aa_tie_gap_nats": self.tie_gap_nats if self.measured else None,
            "aa_min_topk_jaccard": self.min_topk_jaccard,
            "aa_latency_spread_p50": self.latency_spread.p50,
            "aa_latency_spread_max": self.latency_spread.max,
        }


def _spread(a: Completion, b: Completion) -> float | None:
    ta, tb = a.timing.e2el_ms, b.timing.e2el_ms
    if ta is None or tb is None or max(ta, tb) <= 0:
        return None
    return abs(ta - tb) / max(ta, tb)


async def collect(
    pair: EndpointPair,
    requests: Sequence[ProbeRequest],
    *,
    deadline_s: float,
    replica: Endpoint | None = None,
    same_endpoint: bool = True,
    firsts: dict[str, Completion] | None = None,
) -> NoiseFloor:
    """Send each request to the baseline twice (and to `replica`), isolated, in order. The first
    baseline answer of each probe goes into `firsts` when given, so the comparison with the
    candidate can reuse it instead of asking the baseline a third time."""
    comparisons: list[TokenComparison] = []
    spreads: list[float] = []
    for req in requests:
        first = await pair.send(
            pair.baseline,
            req.api,
            req.body,
            gate=NAME,
            probe=f"aa:{req.probe}",
            deadline_s=deadline_s,
        )
        if firsts is not None:
            firsts[req.probe] = first
        others = []
        if same_endpoint:
            others.append(pair.baseline)
        if replica is not None:
            others.append(replica)
        for other in others:
            again = await pair.send(
                other, req.api, req.body, gate=NAME, probe=f"aa:{req.probe}", deadline_s=deadline_s
            )
            tokens = token_pair(first, again)
            if tokens is not None:
                comparisons.append(compare(req.probe, *tokens))
                spread = _spread(first, again)
                if spread is not None:
                    spreads.append(spread)
    parts = (["same-endpoint"] if same_endpoint else []) + (["replica"] if replica else [])
    source = "+".join(parts) if comparisons else "none"
    return NoiseFloor(source, tuple(comparisons), DistributionSummary.from_values(spreads))
