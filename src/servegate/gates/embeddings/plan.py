"""What the embeddings gate sends and what it observed (no judgement here)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any, Literal

import yaml

from servegate.endpoints.errors import ErrorCategory, RequestError
from servegate.endpoints.types import Embeddings, RawResponse

NAME = "embeddings"
ScoreApi = Literal["score", "rerank"]
SCORE_APIS: tuple[ScoreApi, ...] = ("score", "rerank")


@dataclass(frozen=True, slots=True)
class EmbeddingInput:
    """One text the gate embeds; `id` names it in findings."""

    id: str
    text: str


@dataclass(frozen=True, slots=True)
class RerankCase:
    """A query and documents, scored pair by pair by `/score` and `/rerank`."""

    query: str
    documents: tuple[str, ...]


@cache
def _shipped() -> Mapping[str, Any]:
    text = (resources.files("servegate.probes") / "embeddings.yaml").read_text(encoding="utf-8")
    data: Mapping[str, Any] = yaml.safe_load(text)
    return data


def shipped_inputs() -> tuple[EmbeddingInput, ...]:
    """The inputs shipped in `probes/embeddings.yaml`, in file order."""
    return tuple(EmbeddingInput(str(i["id"]), str(i["text"])) for i in _shipped()["inputs"])


def shipped_rerank() -> RerankCase:
    """The query and documents shipped in `probes/embeddings.yaml`."""
    rerank = _shipped()["rerank"]
    return RerankCase(str(rerank["query"]), tuple(str(d) for d in rerank["documents"]))


@dataclass(frozen=True)
class EmbeddingsConfig:
    """What the embeddings gate sends; every threshold lives in `Policy`."""

    inputs: tuple[EmbeddingInput, ...] | None = None  # None: the shipped inputs
    rerank: RerankCase | None = None  # None: the shipped case
    scores: bool = True  # also try /score and /rerank


@dataclass(frozen=True, slots=True)
class ScoreAnswer:
    """What one `/score` or `/rerank` call gave: a score per document (document order), or why
    there are none (`status` None: no HTTP answer at all)."""

    status: int | None
    scores: tuple[float, ...] = ()
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass(frozen=True)
class ScoreEvidence:
    """One score API asked of every side with the same body."""

    api: ScoreApi
    request: Mapping[str, Any]
    baseline: ScoreAnswer
    candidate: ScoreAnswer | None  # None: not asked (the baseline has no such endpoint)
    floor: tuple[tuple[str, ScoreAnswer], ...] = ()  # ("repeat" | "replica", answer)


@dataclass(frozen=True)
class EmbeddingsEvidence:
    """Every answer the gate got, unjudged."""

    inputs: tuple[EmbeddingInput, ...]
    request: Mapping[str, Any]
    baseline: Embeddings
    candidate: Embeddings | None  # None: not asked (the baseline served none, or it hung)
    floor: tuple[tuple[str, Embeddings], ...]  # ("repeat" | "replica", the same request again)
    baseline_url: str
    candidate_url: str
    model: str | None = None
    scores: tuple[ScoreEvidence, ...] = ()
    # One input alone, asked when the baseline's batch failed: does it serve embeddings at all?
    baseline_single: Embeddings | None = None


# A baseline that failed (no answer in time, a 5xx, a broken connection) serves the endpoint and
# was not measured; any other answer without usable vectors (404, "not supported", per-token
# vectors, zero norms) says it does not serve it: not applicable.
FAILED = frozenset(
    {
        ErrorCategory.INFRA,
        ErrorCategory.TIMEOUT,
        ErrorCategory.STALLED,
        ErrorCategory.RESET,
        ErrorCategory.SERVER,
        ErrorCategory.RATE_LIMITED,
        ErrorCategory.TRUNCATED,
        ErrorCategory.TLS,
        ErrorCategory.CANCELLED,
        ErrorCategory.NOT_SENT,
    }
)


def baseline_failed(error: RequestError | None) -> bool:
    """The baseline's embeddings request failed as a request (not measured, never a skip)."""
    return error is not None and error.category in FAILED


def score_answer(api: ScoreApi, raw: RawResponse, documents: int) -> ScoreAnswer:
    """The scores in a `/score` (`data[].score`) or `/rerank` (`results[].relevance_score`)
    answer, put back in document order by their `index`."""
    if raw.error is not None:
        return ScoreAnswer(raw.status, error=f"{raw.error.category}: {raw.error.message}")
    if not raw.ok:
        return ScoreAnswer(raw.status, error=f"HTTP {raw.status}")
    try:
        payload = raw.json()
    except ValueError:
        return ScoreAnswer(raw.status, error="the answer is not JSON")
    field, key = ("data", "score") if api == "score" else ("results", "relevance_score")
    items = payload.get(field) if isinstance(payload, dict) else None
    if not isinstance(items, list):
        return ScoreAnswer(raw.status, error=f"no {field} list")
    found: dict[int, float] = {}
    for position, item in enumerate(items):
        if not isinstance(item, dict):
            return ScoreAnswer(raw.status, error=f"item {position} is not an object")
        index, value = item.get("index", position), item.get(key)
        if not isinstance(index, int) or not isinstance(value, int | float):
            return ScoreAnswer(raw.status, error=f"item {position} has no numeric {key}")
        found[index] = float(value)
    if sorted(found) != list(range(documents)):
        return ScoreAnswer(
            raw.status, error=f"{len(found)} scores for {documents} documents ({sorted(found)})"
        )
    return ScoreAnswer(raw.status, tuple(found[i] for i in range(documents)))


def score_request(api: ScoreApi, case: RerankCase) -> dict[str, Any]:
    """The body vLLM's `/score` (text_1 against each text_2) or `/rerank` takes."""
    if api == "score":
        return {"text_1": case.query, "text_2": list(case.documents)}
    return {"query": case.query, "documents": list(case.documents)}
