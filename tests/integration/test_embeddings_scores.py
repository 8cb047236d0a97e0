"""The embeddings gate's /score and /rerank path over real HTTP, against scripted vLLM-shaped
servers.

No engine on these machines serves /score or /rerank, so this is the one place the score path
runs end to end (collect → OpenAIEndpoint.raw → parsing → evaluate): the servers answer the
response shapes vLLM documents, the candidate with one pair shifted by 8.5 % (the class of
vLLM #35569). It says nothing about a real reranker's noise floor.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from servegate.config.models import EndpointConfig, GateConfig, Policy
from servegate.endpoints.http import OpenAIEndpoint
from servegate.endpoints.scripted import ScriptedServer, reply_json
from servegate.gates import embeddings
from servegate.gates.pair import EndpointPair
from servegate.verdict.model import Outcome, Status

QUERY_SCORES = (0.91, 0.12, 0.64, 0.02)  # one per shipped document


def vllm_like(srv: ScriptedServer, scores: tuple[float, ...]) -> ScriptedServer:
    """A reranker model: no /v1/embeddings (404), /v1/score and /v1/rerank answering `scores`."""
    score = {"object": "list", "data": [{"index": i, "object": "score", "score": s}
                                         for i, s in enumerate(scores)]}  # fmt: skip
    ranked = sorted(enumerate(scores), key=lambda pair: -pair[1])
    rerank = {"results": [{"index": i, "relevance_score": s} for i, s in ranked]}
    return srv.route("/v1/score", reply_json(score)).route("/v1/rerank", reply_json(rerank))


@pytest.fixture
async def servers() -> AsyncIterator[tuple[ScriptedServer, ScriptedServer]]:
    async with ScriptedServer() as baseline, ScriptedServer() as candidate:
        yield baseline, candidate


async def judge(
    baseline: ScriptedServer, candidate: ScriptedServer
) -> embeddings.EmbeddingsEvidence:
    b, c = OpenAIEndpoint("baseline", baseline.url), OpenAIEndpoint("candidate", candidate.url)
    async with b, c:
        pair = EndpointPair(b, c, model="reranker")
        cfg = GateConfig(baseline=EndpointConfig(url=baseline.url),
                         candidate=EndpointConfig(url=candidate.url))  # fmt: skip
        return await embeddings.collect(pair, cfg)


async def test_the_same_scores_pass_and_embeddings_are_listed_as_not_applicable(
    servers: tuple[ScriptedServer, ScriptedServer],
) -> None:
    baseline, candidate = servers
    vllm_like(baseline, QUERY_SCORES)
    vllm_like(candidate, QUERY_SCORES)
    evidence = await judge(baseline, candidate)
    result = embeddings.evaluate(evidence, Policy())
    assert result.status is Status.PASS, result.summary
    assert {c.name: c.outcome for c in result.checks} == {
        "embeddings": Outcome.NOT_APPLICABLE, "score": Outcome.PASS, "rerank": Outcome.PASS,
    }  # fmt: skip
    assert evidence.scores[1].baseline.scores == QUERY_SCORES  # rerank put back in document order
    # baseline, candidate and the baseline's repeat for each API; the embeddings only once.
    assert [r.path for r in baseline.requests] == ["/v1/embeddings"] + ["/v1/score"] * 2 + [
        "/v1/rerank"
    ] * 2
    assert [r.path for r in candidate.requests] == ["/v1/score", "/v1/rerank"]


async def test_a_pair_shifted_by_eight_and_a_half_percent_fails_on_both_apis(
    servers: tuple[ScriptedServer, ScriptedServer],
) -> None:
    baseline, candidate = servers
    vllm_like(baseline, QUERY_SCORES)
    shifted = (QUERY_SCORES[0], QUERY_SCORES[1], QUERY_SCORES[2] * 1.085, QUERY_SCORES[3])
    vllm_like(candidate, shifted)
    result = embeddings.evaluate(await judge(baseline, candidate), Policy())
    assert result.status is Status.FAIL
    assert [(f.probe, f.category) for f in result.findings] == [
        ("embeddings:score", "score_drift"),
        ("embeddings:rerank", "score_drift"),
    ]
    assert all("document 2" in f.message for f in result.findings)
    assert result.findings[0].curl is not None
    assert f"{candidate.url}/score" in result.findings[0].curl
