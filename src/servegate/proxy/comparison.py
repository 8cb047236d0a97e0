"""One mirrored pair compared with the gates' own comparisons: equality of greedy answers with
the first divergence (per character, and per token where both sides returned logprobs),
degeneration relative to the primary, JSON/tool-call parse success, latency, embedding cosine."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from servegate.endpoints.answers import degenerate_relative, same_answer
from servegate.endpoints.body import decode_json, embeddings_of
from servegate.endpoints.errors import FaultError
from servegate.endpoints.text import opening
from servegate.endpoints.types import Completion
from servegate.gates.tokens import compare, cosine, token_pair
from servegate.proxy.content import is_greedy, request_metrics
from servegate.proxy.exchange import EMBEDDINGS_PATH, Exchange, completion_of
from servegate.stats.degeneration import degeneration_metrics
from servegate.stats.divergence import first_divergence


@dataclass(frozen=True)
class PairComparison:
    """How the candidate's answer to one request compares with the primary's. A field is None
    where it could not be measured (a side failed, the path has no text, the request was not
    greedy so equality is not expected)."""

    path: str
    greedy: bool
    primary_ok: bool
    candidate_ok: bool
    exact_match: bool | None  # greedy requests answered by both sides only
    first_divergence_char: int | None
    first_divergence_token: int | None
    same_finish_reason: bool | None
    candidate_degenerate: str | None  # why, where the primary's answer is not degenerate
    primary_metrics: Mapping[str, float]
    candidate_metrics: Mapping[str, float]
    ttft_delta_ms: float | None  # candidate − primary
    e2el_delta_ms: float | None
    min_embedding_cosine: float | None
    # What the sampled pairs are judged on as distributions (proxy/sampled.py); None where a
    # side gave no answer text (failed, or embeddings).
    primary_length_chars: int | None = None
    candidate_length_chars: int | None = None
    primary_finish_reason: str | None = None
    candidate_finish_reason: str | None = None
    primary_opening: str | None = None  # the answer's first OPENING_WORDS words
    candidate_opening: str | None = None
    # Share of the answer's visible characters that are neither letters nor digits, 0..1.
    primary_symbol_ratio: float | None = None
    candidate_symbol_ratio: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


# The comparison's fields that quote the answers' words: written to disk only as the answers'
# bodies are (`--store-bodies`; proxy/recording.py).
ANSWER_WORDS = ("primary_opening", "candidate_opening")


def _delta(name: str, a: Mapping[str, float], b: Mapping[str, float]) -> float | None:
    return b[name] - a[name] if name in a and name in b else None


def _min_cosine(primary: Exchange, candidate: Exchange, request: Mapping[str, Any]) -> float | None:
    try:
        a, _ = embeddings_of(decode_json(primary.body), request)
        b, _ = embeddings_of(decode_json(candidate.body), request)
    except FaultError:
        return None
    if len(a) != len(b) or not a:
        return 0.0
    return min(cosine(u, v) for u, v in zip(a, b, strict=True))


def compare_pair(
    path: str,
    request: Mapping[str, Any],
    primary: Exchange,
    candidate: Exchange,
    *,
    primary_completion: Completion | None = None,
) -> PairComparison:
    """Compare the two answers to `request` (pure; both exchanges complete). The primary's
    answer is read here unless the caller already read it (`primary_completion`)."""
    p = primary_completion
    if p is None:
        p = completion_of(primary, path, request)
    c = completion_of(candidate, path, request)
    pm, cm = request_metrics(primary, p, request), request_metrics(candidate, c, request)
    greedy = is_greedy(request)
    both = p is not None and c is not None and p.ok and c.ok
    exact = divergence = token_divergence = same_finish = degenerate_why = None
    shapes: dict[str, Any] = {}
    if both and p is not None and c is not None:
        same_finish = p.finish_reason == c.finish_reason
        for side, answer in (("primary", p), ("candidate", c)):
            shapes[f"{side}_length_chars"] = len(answer.text)
            shapes[f"{side}_finish_reason"] = answer.finish_reason
            shapes[f"{side}_opening"] = opening(answer)
            shapes[f"{side}_symbol_ratio"] = degeneration_metrics(answer.text).symbol_ratio
        found = degenerate_relative(c.text, p.text)
        degenerate_why = None if found is None else found[1]
        if greedy:
            exact = same_answer(p, c)
            divergence = first_divergence(p.text, c.text)
            tokens = token_pair(p, c)
            if tokens is not None:
                token_divergence = compare(path, *tokens).first_divergence
    cos = None
    if path == EMBEDDINGS_PATH and not primary.failed and not candidate.failed:
        cos = _min_cosine(primary, candidate, request)
    return PairComparison(
        path=path,
        greedy=greedy,
        primary_ok=not primary.failed and (p is None or p.ok),
        candidate_ok=not candidate.failed and (c is None or c.ok),
        exact_match=exact,
        first_divergence_char=divergence,
        first_divergence_token=token_divergence,
        same_finish_reason=same_finish,
        candidate_degenerate=degenerate_why,
        primary_metrics=pm,
        candidate_metrics=cm,
        ttft_delta_ms=_delta("ttft_ms", pm, cm),
        e2el_delta_ms=_delta("e2el_ms", pm, cm),
        min_embedding_cosine=cos,
        **shapes,
    )
