"""Greedy token sequences compared position by position: divergence, margins, top-k, |Δlogprob|.

The one definition of how two answers of the same greedy request are compared, used for the
candidate against the baseline and for the baseline against itself along its own paths (the
noise floor), so both are measured the same way.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from servegate.endpoints.errors import ErrorCategory
from servegate.endpoints.types import Completion, TokenLogprob
from servegate.stats.divergence import first_divergence


@dataclass(frozen=True, slots=True)
class TokenComparison:
    """Greedy tokens of a reference side (`a`) against another side (`b`) for one probe."""

    probe: str
    tokens_a: int
    tokens_b: int
    first_divergence: int | None  # token index; None when the sequences are equal
    margin_nats: float | None  # a's top-1 minus top-2 at the divergence
    # a's top-1 minus a's logprob of b's token there (a lower bound when b's token is unseen)
    gap_nats: float | None
    b_token_in_top: bool | None  # b's token among a's top-k at the divergence
    a_token_in_top: bool | None  # a's token among b's top-k at the divergence
    topk_jaccard: float | None  # mean Jaccard of the top-k token sets over the common prefix
    # mean |logprob_a - logprob_b| of a's tokens on the common prefix, and at the divergence
    # when b's top-k has a's token there (the context is still shared)
    mean_abs_dlogprob: float | None
    max_abs_dlogprob: float | None
    prefix_tokens: int = 0  # length of the common prefix the |Δlogprob| is taken over

    @property
    def exact(self) -> bool:
        return self.first_divergence is None

    @property
    def early_stop(self) -> bool:
        """One side stopped where the other went on: a divergence with no token to compare."""
        return self.first_divergence is not None and self.gap_nats is None

    @property
    def mutual_top_k(self) -> bool | None:
        """vLLM's criterion: each side's token is inside the other's top-k at the divergence."""
        if self.b_token_in_top is None or self.a_token_in_top is None:
            return None
        return self.b_token_in_top and self.a_token_in_top


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
    b_in_a = a_in_b = None
    if div is not None and div < len(a) and div < len(b):
        margin = margin_nats(a[div])
        gap, b_in_a = _gap(a[div], b[div].token)
        _, a_in_b = _gap(b[div], a[div].token)
        # The context is still shared at the divergence: a's token, as b scored it there.
        seen = dict(ranked(b[div]))
        if a[div].token in seen:
            deltas.append(abs(a[div].logprob - seen[a[div].token]))
    return TokenComparison(
        probe=probe,
        tokens_a=len(a),
        tokens_b=len(b),
        first_divergence=div,
        margin_nats=margin,
        gap_nats=gap,
        b_token_in_top=b_in_a,
        a_token_in_top=a_in_b,
        topk_jaccard=sum(jaccards) / len(jaccards) if jaccards else None,
        mean_abs_dlogprob=sum(deltas) / len(deltas) if deltas else None,
        max_abs_dlogprob=max(deltas) if deltas else None,
        prefix_tokens=common,
    )


def token_pair(
    a: Completion, b: Completion
) -> tuple[tuple[TokenLogprob, ...], tuple[TokenLogprob, ...]] | None:
    """Both sides' tokens with logprobs; None unless both answered and both returned logprobs."""
    if not (a.ok and b.ok) or a.logprobs is None or b.logprobs is None:
        return None
    return a.logprobs, b.logprobs


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
