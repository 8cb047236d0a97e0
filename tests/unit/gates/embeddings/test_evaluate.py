"""The embeddings gate's judgement on plain data: vectors, cosine parity and scores vs the noise."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import pytest

from servegate.config.models import Policy, Tolerance
from servegate.endpoints.errors import ErrorCategory, RequestError
from servegate.endpoints.types import Embeddings, RawResponse
from servegate.gates.embeddings import EmbeddingsEvidence, evaluate, shipped_inputs
from servegate.gates.embeddings.judgement import cosine_distance, problems
from servegate.gates.embeddings.plan import (
    EmbeddingInput,
    ScoreAnswer,
    ScoreEvidence,
    score_answer,
    shipped_rerank,
)
from servegate.verdict.model import GateResult, Outcome, Status

INPUTS = (EmbeddingInput("fox", "The fox."), EmbeddingInput("zh", "北京。"))
BASE = ((1.0, 0.0, 0.0), (0.0, 1.0, 0.0))
URL = "http://127.0.0.1:2/v1"


def turned(vector: tuple[float, ...], distance: float) -> tuple[float, ...]:
    """`vector` (a unit vector along one axis) turned so that 1 − cosine is `distance`."""
    cos = 1.0 - distance
    axis = vector.index(1.0)
    out = [0.0, 0.0, 0.0]
    out[axis], out[(axis + 2) % 3] = cos, math.sqrt(1.0 - cos * cos)
    return tuple(out)


def emb(*vectors: tuple[float, ...]) -> Embeddings:
    return Embeddings(status=200, vectors=tuple(vectors))


def failed(category: ErrorCategory, message: str, status: int | None = 200) -> Embeddings:
    return Embeddings(status=status, error=RequestError(category, message, status=status))


def evidence(
    candidate: Embeddings | None,
    *,
    baseline: Embeddings | None = None,
    floor: tuple[tuple[str, Embeddings], ...] | None = None,
    scores: tuple[ScoreEvidence, ...] = (),
) -> EmbeddingsEvidence:
    return EmbeddingsEvidence(
        inputs=INPUTS,
        request={"model": "m", "input": [i.text for i in INPUTS]},
        baseline=baseline or emb(*BASE),
        candidate=candidate,
        floor=(("repeat", emb(*BASE)),) if floor is None else floor,
        baseline_url="http://127.0.0.1:1/v1",
        candidate_url=URL,
        model="m",
        scores=scores,
    )


def outcome(result: GateResult, name: str) -> Outcome:
    return next(c.outcome for c in result.checks if c.name == name)


def test_identical_vectors_pass_with_every_rule_checked() -> None:
    result = evaluate(evidence(emb(*BASE)), Policy())
    assert result.status is Status.PASS, result.summary
    assert {c.name: c.outcome for c in result.checks} == {
        n: Outcome.PASS for n in ("answer", "count", "dimension", "finite", "zero_norm", "cosine")
    }
    assert result.metrics["embedding_max_cosine_distance"] == 0.0
    assert result.metrics["embedding_floor_paths"] == "repeat"


def test_a_turn_beyond_the_tolerance_fails_naming_the_input_with_a_curl_reproducer() -> None:
    result = evaluate(evidence(emb(BASE[0], turned(BASE[1], 5e-3))), Policy())
    assert result.status is Status.FAIL
    assert "zh" in next(c.reason for c in result.checks if c.name == "cosine")
    [finding] = result.findings
    assert (finding.probe, finding.category, finding.blocking) == (
        "embeddings:zh",
        "embedding_drift",
        True,
    )
    assert finding.curl is not None
    assert f"{URL}/embeddings" in finding.curl
    assert "北京。" in finding.curl
    assert "The fox." not in finding.curl


def test_a_turn_inside_the_tolerance_passes() -> None:
    result = evaluate(evidence(emb(turned(BASE[0], 5e-4), BASE[1])), Policy())
    assert result.status is Status.PASS, result.summary


def test_the_baseline_own_noise_raises_each_input_limit() -> None:
    noisy_floor = (("repeat", emb(turned(BASE[0], 2e-3), BASE[1])),)
    # fox: floor 2e-3, limit 3 × 2e-3 + 1e-3 = 7e-3; zh: floor 0, limit 1e-3.
    inside = evaluate(evidence(emb(turned(BASE[0], 5e-3), BASE[1]), floor=noisy_floor), Policy())
    assert inside.status is Status.PASS, inside.summary
    beyond = evaluate(evidence(emb(turned(BASE[0], 9e-3), BASE[1]), floor=noisy_floor), Policy())
    assert beyond.status is Status.FAIL
    assert [f.probe for f in beyond.findings] == ["embeddings:fox"]


def test_a_per_model_tolerance_is_used() -> None:
    policy = Policy(models={"m": Tolerance(embedding_cosine_distance=1e-2)})
    result = evaluate(evidence(emb(BASE[0], turned(BASE[1], 5e-3))), policy)
    assert result.status is Status.PASS, result.summary


def test_without_a_usable_repeat_the_floor_is_listed_as_not_measured() -> None:
    floor = (("repeat", failed(ErrorCategory.SERVER, "boom", 500)),)
    result = evaluate(evidence(emb(*BASE), floor=floor), Policy())
    assert result.status is Status.PASS
    assert any(n.startswith("the baseline's noise floor") for n in result.not_measured)
    assert evaluate(evidence(emb(*BASE), floor=floor), Policy(), strict=True).status is (
        Status.INCONCLUSIVE
    )


@pytest.mark.parametrize(
    ("candidate", "rule"),
    [
        (emb(BASE[0]), "count"),
        (emb(BASE[0], (0.0, 1.0)), "dimension"),
        (emb(BASE[0], (0.0, math.nan, 0.0)), "finite"),
        (emb(BASE[0], (0.0, 0.0, 0.0)), "zero_norm"),
    ],
    ids=["missing-vector", "short-vector", "nan", "zero-norm"],
)
def test_a_malformed_candidate_answer_fails_its_rule(candidate: Embeddings, rule: str) -> None:
    result = evaluate(evidence(candidate), Policy())
    assert result.status is Status.FAIL
    assert outcome(result, rule) is Outcome.FAIL
    assert all(f.category == "embedding_invalid" for f in result.findings)
    assert "cosine" not in {c.name for c in result.checks}  # not judged on broken vectors


def test_a_candidate_the_client_refused_fails_and_nan_is_critical() -> None:
    nan = failed(ErrorCategory.EMBEDDING_INVALID, "embedding 1 holds NaN or Infinity")
    result = evaluate(evidence(nan), Policy())
    assert result.status is Status.FAIL
    assert [(f.category, f.severity) for f in result.findings] == [("non_finite", "critical")]


def test_a_hung_candidate_is_inconclusive_not_a_pass() -> None:
    result = evaluate(evidence(None), Policy())
    assert result.status is Status.INCONCLUSIVE


@pytest.mark.parametrize(
    "baseline",
    [
        failed(ErrorCategory.REJECTED, "HTTP 404 Not Found", 404),
        failed(ErrorCategory.EMBEDDING_INVALID, "embedding 0 holds non-numbers"),
        emb(BASE[0], (0.0, 0.0, 0.0)),
    ],
    ids=["no-endpoint", "per-token-vectors", "zero-norm"],
)
def test_a_baseline_without_valid_embeddings_skips_the_gate_with_the_reason(
    baseline: Embeddings,
) -> None:
    result = evaluate(evidence(None, baseline=baseline, floor=()), Policy())
    assert result.status is Status.SKIP
    assert result.summary.startswith("skipped: not applicable: the baseline serves none")
    assert result.not_applicable  # listed, never counted as a pass


@pytest.mark.parametrize(
    "baseline",
    [
        failed(ErrorCategory.TIMEOUT, "no headers within 60 s"),
        failed(ErrorCategory.SERVER, "HTTP 503", 503),
        failed(ErrorCategory.RESET, "connection reset"),
    ],
    ids=["timeout", "5xx", "reset"],
)
def test_a_baseline_that_failed_is_not_measured_never_skipped(baseline: Embeddings) -> None:
    # Issue 20 item 11: any baseline error skipped the gate, a timeout and a 503 included.
    result = evaluate(evidence(None, baseline=baseline, floor=()), Policy())
    assert result.status is Status.INCONCLUSIVE
    assert outcome(result, "embeddings") is Outcome.NOT_MEASURED
    assert result.summary.startswith("not measured: embeddings: the baseline failed")


# --- /score and /rerank ----------------------------------------------------------------------


def scored(*scores: float) -> ScoreAnswer:
    return ScoreAnswer(200, scores)


def score_evidence(
    candidate: ScoreAnswer | None, floor: tuple[float, ...] = (0.9, 0.1, 0.5)
) -> ScoreEvidence:
    body = {"text_1": "q", "text_2": ["a", "b", "c"]}
    return ScoreEvidence(
        "score", body, scored(0.9, 0.1, 0.5), candidate, (("repeat", scored(*floor)),)
    )


def test_scores_within_the_tolerance_pass_and_a_shifted_pair_fails() -> None:
    same = evaluate(
        evidence(emb(*BASE), scores=(score_evidence(scored(0.905, 0.1, 0.5)),)), Policy()
    )
    assert outcome(same, "score") is Outcome.PASS
    shifted = evaluate(
        evidence(emb(*BASE), scores=(score_evidence(scored(0.9, 0.1, 0.585)),)), Policy()
    )
    assert shifted.status is Status.FAIL
    [finding] = shifted.findings
    assert (finding.category, finding.probe) == ("score_drift", "embeddings:score")
    assert "document 2" in finding.message
    assert finding.curl is not None
    assert f"{URL}/score" in finding.curl


def test_the_baseline_score_noise_raises_the_limit() -> None:
    # document 2 moves 0.03 between the baseline's own answers: limit 3 × 0.03 + 0.01 = 0.1.
    noisy = score_evidence(scored(0.9, 0.1, 0.585), floor=(0.9, 0.1, 0.53))
    assert (
        outcome(evaluate(evidence(emb(*BASE), scores=(noisy,)), Policy()), "score") is Outcome.PASS
    )


def test_a_nan_score_is_beyond_any_limit() -> None:
    result = evaluate(
        evidence(emb(*BASE), scores=(score_evidence(scored(0.9, math.nan, 0.5)),)), Policy()
    )
    assert outcome(result, "score") is Outcome.FAIL


def test_a_baseline_without_scores_lists_them_as_not_measured() -> None:
    missing = ScoreEvidence("rerank", {}, ScoreAnswer(404, error="HTTP 404"), None)
    result = evaluate(evidence(emb(*BASE), scores=(missing,)), Policy())
    assert result.status is Status.PASS
    assert any("/rerank" in n and "HTTP 404" in n for n in result.not_applicable)
    failing = ScoreEvidence("rerank", {}, ScoreAnswer(502, error="HTTP 502"), None)
    result = evaluate(evidence(emb(*BASE), scores=(failing,)), Policy())
    assert result.status is Status.INCONCLUSIVE  # a failed baseline is not measured


def test_a_reranker_without_embeddings_is_judged_on_its_scores_alone() -> None:
    no_embeddings = failed(ErrorCategory.REJECTED, "HTTP 404", 404)
    result = evaluate(
        evidence(
            None, baseline=no_embeddings, floor=(), scores=(score_evidence(scored(0.5, 0.1, 0.5)),)
        ),
        Policy(),
    )
    assert result.status is Status.FAIL
    assert outcome(result, "embeddings") is Outcome.NOT_APPLICABLE


def raw(body: Any, status: int = 200) -> RawResponse:
    import json

    return RawResponse(status=status, body=json.dumps(body).encode())


@pytest.mark.parametrize(
    ("api", "body", "expected"),
    [
        ("score", {"data": [{"index": 1, "score": 0.2}, {"index": 0, "score": 0.7}]}, (0.7, 0.2)),
        ("rerank", {"results": [{"index": 1, "relevance_score": 0.1},
                                {"index": 0, "relevance_score": 0.9}]}, (0.9, 0.1)),
    ],
    ids=["score", "rerank-sorted-by-relevance"],
)  # fmt: skip
def test_scores_come_back_in_document_order(
    api: Any, body: Any, expected: tuple[float, ...]
) -> None:
    assert score_answer(api, raw(body), 2) == ScoreAnswer(200, expected)


@pytest.mark.parametrize(
    ("body", "status", "error"),
    [
        ({"detail": "Not Found"}, 404, "HTTP 404"),
        ({"data": "x"}, 200, "no data list"),
        ({"data": [{"index": 0, "score": "high"}]}, 200, "item 0 has no numeric score"),
        ({"data": [{"index": 0, "score": 0.5}]}, 200, "1 scores for 2 documents"),
    ],
    ids=["not-found", "not-a-list", "not-a-number", "one-missing"],
)
def test_a_score_answer_that_does_not_parse_says_why(body: Any, status: int, error: str) -> None:
    answer = score_answer("score", raw(body, status), 2)
    assert not answer.ok
    assert answer.error is not None
    assert answer.error.startswith(error)


# --- the pieces ------------------------------------------------------------------------------


def test_cosine_distance_is_zero_for_the_same_direction_and_one_when_undefined() -> None:
    assert cosine_distance((1.0, 2.0), (2.0, 4.0)) == pytest.approx(0.0, abs=1e-15)
    assert cosine_distance((1.0, 0.0), (0.0, 1.0)) == pytest.approx(1.0)
    assert cosine_distance((1.0, 0.0), (0.0, 0.0)) == 1.0
    assert cosine_distance((1.0, 0.0), (1.0, 0.0, 0.0)) == 1.0


def test_problems_name_every_broken_input() -> None:
    vectors = ((1.0, 0.0), (math.inf, 1.0), (0.0, 0.0), (1.0,))
    assert problems(vectors, 5, 2) == {
        "count": [4], "dimension": [3], "finite": [1], "zero_norm": [2]
    }  # fmt: skip


def test_the_shipped_inputs_are_distinct_and_the_rerank_case_has_documents() -> None:
    inputs = shipped_inputs()
    assert len(inputs) >= 6
    assert len({i.id for i in inputs}) == len(inputs)
    assert all(i.text.strip() for i in inputs)
    assert len(shipped_rerank().documents) >= 2


@pytest.mark.parametrize(
    ("single", "status"),
    [
        (failed(ErrorCategory.EMBEDDING_INVALID, "embedding 0 holds non-numbers"), Status.SKIP),
        (emb(BASE[0]), Status.INCONCLUSIVE),
        (
            failed(ErrorCategory.SERVER, "HTTP 500: must be created with embedding=True", 500),
            Status.SKIP,
        ),
        (failed(ErrorCategory.TIMEOUT, "no headers in 60 s"), Status.INCONCLUSIVE),
    ],
    ids=[
        "one-input-gets-per-token-vectors",
        "one-input-embeds-fine",
        "one-input-error-answer",
        "one-input-no-answer",
    ],
)
def test_a_failed_batch_is_told_from_a_server_without_embeddings_by_one_input(
    single: Embeddings, status: Status
) -> None:
    # A generative llama.cpp server fails the batch with HTTP 500 (n_seq_max 1) and answers one
    # input with per-token vectors: it serves no sentence embeddings (not applicable). A server
    # that embeds one input fine but failed the batch failed: not measured.
    batch = failed(ErrorCategory.SERVER, "HTTP 500: llama_decode returned -1", 500)
    ev = replace(evidence(None, baseline=batch, floor=()), baseline_single=single)
    assert evaluate(ev, Policy()).status is status
