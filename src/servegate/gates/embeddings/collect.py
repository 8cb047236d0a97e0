"""The embeddings gate: `/v1/embeddings` (and vLLM's `/score`, `/rerank`) judged against the noise.

A fixed set of inputs (`probes/embeddings.yaml`) is embedded by the baseline, the candidate, the
baseline again and the replica when there is one. Each side's answer must be well formed (one
vector per input, the baseline's dimension, finite, non-zero norm); each input's cosine distance
between baseline and candidate must stay within `noise_k ×` the baseline's distance to itself
(A/A) `+` the model's tolerance. A server with `/score` or `/rerank` answers one score per
(query, document) pair, judged the same way on the score deviation (the class of a backend that
shifts reranker scores by 8.5 % on one GPU family, vLLM #35569).

A baseline that serves no embeddings leaves the gate nothing to compare: it is skipped with the
reason, never passed. Judgement is in `embeddings_judgement`; this module only observes.
"""

from __future__ import annotations

from servegate.config.models import GateConfig
from servegate.endpoints.protocol import Endpoint
from servegate.endpoints.types import Embeddings
from servegate.gates.embeddings.judgement import evaluate
from servegate.gates.embeddings.plan import (
    NAME,
    SCORE_APIS,
    EmbeddingInput,
    EmbeddingsConfig,
    EmbeddingsEvidence,
    RerankCase,
    ScoreAnswer,
    ScoreApi,
    ScoreEvidence,
    baseline_failed,
    score_answer,
    score_request,
    shipped_inputs,
    shipped_rerank,
)
from servegate.gates.pair import EndpointPair

__all__ = [
    "NAME",
    "EmbeddingInput",
    "EmbeddingsConfig",
    "EmbeddingsEvidence",
    "RerankCase",
    "ScoreAnswer",
    "ScoreEvidence",
    "collect",
    "evaluate",
    "score_answer",
    "shipped_inputs",
    "shipped_rerank",
]


def _hung(result: Embeddings) -> bool:
    return result.error is not None and result.error.hung


async def collect(
    pair: EndpointPair, cfg: GateConfig, opts: EmbeddingsConfig | None = None
) -> EmbeddingsEvidence:
    """Embed the inputs on baseline, candidate, baseline again and the replica; then the same
    for `/score` and `/rerank` where the baseline answers them."""
    opts = opts or EmbeddingsConfig()
    inputs = opts.inputs if opts.inputs is not None else shipped_inputs()
    dl = cfg.request_deadline_s
    body = pair.body({"input": [i.text for i in inputs]})

    async def embed(ep: Endpoint, probe: str) -> Embeddings:
        return await pair.recording(ep, gate=NAME, probe=probe).embeddings(body, deadline_s=dl)

    baseline = await embed(pair.baseline, "embeddings")
    single: Embeddings | None = None
    if baseline_failed(baseline.error):
        # Failed, or does it not serve sentence embeddings at all? One input alone tells: a
        # generative llama.cpp server fails a batch with HTTP 500 and answers one input with
        # per-token vectors (not applicable); a server that embeds one input fine failed.
        one = pair.body({"input": [inputs[0].text]})
        tagged = pair.recording(pair.baseline, gate=NAME, probe="embeddings:single")
        single = await tagged.embeddings(one, deadline_s=dl)
    candidate: Embeddings | None = None
    floor: list[tuple[str, Embeddings]] = []
    if baseline.ok:
        if not pair.hung(pair.candidate):
            candidate = await embed(pair.candidate, "embeddings")
        floor.append(("repeat", await embed(pair.baseline, "embeddings:repeat")))
        if pair.replica is not None:
            floor.append(("replica", await embed(pair.replica, "embeddings:replica")))
    scores: list[ScoreEvidence] = []
    if opts.scores:
        case = opts.rerank or shipped_rerank()
        # A candidate that hung on embeddings is not asked again (None reads "not asked").
        hung = pair.hung(pair.candidate) or (candidate is not None and _hung(candidate))
        for api in SCORE_APIS:
            scores.append(await _collect_scores(pair, api, case, dl, ask_candidate=not hung))
    return EmbeddingsEvidence(
        inputs=inputs,
        request=body,
        baseline=baseline,
        candidate=candidate,
        floor=tuple(floor),
        baseline_url=pair.baseline.base_url,
        candidate_url=pair.candidate.base_url,
        model=pair.model,
        scores=tuple(scores),
        baseline_single=single,
    )


async def _collect_scores(
    pair: EndpointPair, api: ScoreApi, case: RerankCase, dl: float, *, ask_candidate: bool
) -> ScoreEvidence:
    body = pair.body(score_request(api, case))

    async def ask(ep: Endpoint, probe: str) -> ScoreAnswer:
        tagged = pair.recording(ep, gate=NAME, probe=probe)
        return score_answer(
            api, await tagged.raw("POST", api, body, deadline_s=dl), len(case.documents)
        )

    baseline = await ask(pair.baseline, api)
    if not baseline.ok or not ask_candidate:
        return ScoreEvidence(api, body, baseline, None)
    candidate = await ask(pair.candidate, api)
    floor = [("repeat", await ask(pair.baseline, f"{api}:repeat"))]
    if pair.replica is not None:
        floor.append(("replica", await ask(pair.replica, f"{api}:replica")))
    return ScoreEvidence(api, body, baseline, candidate, tuple(floor))
