import math

import pytest

from servegate.config.models import Policy
from servegate.endpoints.errors import ErrorCategory, RequestError
from servegate.endpoints.types import Completion, Embeddings, TokenLogprob
from servegate.gates.noise import CrossScore, NoiseFloor, ProbeRequest, compare
from servegate.gates.numerics import NumericsEvidence, Observation, evaluate
from servegate.stats.distribution import DistributionSummary
from servegate.verdict.model import GateResult, Severity, Status

OK_TOKENS = (
    TokenLogprob("O", -0.05, (("O", -0.05), ("Ok", -3.2), ("Yes", -4.0))),
    TokenLogprob("K", -0.01, (("K", -0.01), ("k", -5.0))),
)
ALIGNED = {"baseline": 0.0, "candidate": 0.0}


def answer(tokens: tuple[TokenLogprob, ...] | None, text: str | None = None) -> Completion:
    content = text if text is not None else "".join(t.token for t in tokens or ())
    return Completion(status=200, content=content, logprobs=tokens)


def observe(
    baseline: Completion, candidate: Completion, probe: str = "canary", **kw: CrossScore
) -> Observation:
    body = {"messages": [{"role": "user", "content": "Say OK"}], "max_tokens": 24}
    return Observation(ProbeRequest(probe, "chat", body), baseline, candidate, **kw)


def judge(
    *observations: Observation,
    noise: NoiseFloor | None = None,
    embeddings: tuple[Embeddings, Embeddings | None] | None = None,
) -> GateResult:
    evidence = NumericsEvidence(
        observations=observations,
        noise=noise or NoiseFloor.zero(),
        baseline_url="http://127.0.0.1:1/v1",
        candidate_url="http://127.0.0.1:2/v1",
        alignment_nats=ALIGNED,
        embeddings=embeddings,
    )
    return evaluate(evidence, Policy())


def blocking(result: GateResult) -> list[str]:
    return [f.category for f in result.findings if f.blocking]


def test_identical_outputs_pass_with_full_agreement() -> None:
    result = judge(observe(answer(OK_TOKENS), answer(OK_TOKENS)))
    assert result.status is Status.PASS
    assert result.metrics["exact_match_rate"] == 1.0
    assert result.metrics["mean_abs_dlogprob_nats"] == 0.0


def test_a_near_tie_flip_is_benign() -> None:
    base = (TokenLogprob("Yes", -0.60, (("Yes", -0.60), ("No", -0.85))),)
    cand = (TokenLogprob("No", -0.62, (("No", -0.62), ("Yes", -0.80))),)
    result = judge(observe(answer(base), answer(cand)))
    assert result.status is Status.PASS
    assert result.metrics["near_tie_flips"] == 1
    assert result.metrics["confident_flips"] == 0


def test_a_confident_flip_fails_with_excerpts_of_both_texts_at_the_divergence() -> None:
    commas = (TokenLogprob(",", -0.01, ((",", -0.01),)), TokenLogprob(",", -0.01, ((",", -0.01),)))
    result = judge(observe(answer(OK_TOKENS), answer(commas)))
    assert result.status is Status.FAIL
    assert blocking(result) == ["numerics"]
    finding = result.findings[0]
    assert finding.baseline_excerpt == "…⟦OK⟧"
    assert finding.candidate_excerpt == "…⟦,,⟧"
    assert "outside the baseline's top-k" in finding.message
    assert finding.curl is not None
    assert "127.0.0.1:2" in finding.curl


def test_a_flip_the_baseline_also_makes_against_itself_is_within_the_noise() -> None:
    base = (TokenLogprob("Yes", -0.3, (("Yes", -0.3), ("No", -1.5))),)
    cand = (TokenLogprob("No", -0.4, (("No", -0.4), ("Yes", -1.2))),)
    aa = compare("canary", base, cand)  # the baseline flipped the same way against itself
    floor = NoiseFloor("same-endpoint", (aa,), DistributionSummary.from_values(()))
    result = judge(observe(answer(base), answer(cand)), noise=floor)
    assert result.status is Status.PASS
    assert result.metrics["near_tie_limit_nats"] == pytest.approx(1.2)


def test_prefix_drift_beyond_the_epsilon_fails_when_no_floor_was_measured() -> None:
    drifted = tuple(TokenLogprob(t.token, t.logprob - 0.3, t.top) for t in OK_TOKENS)
    result = judge(observe(answer(OK_TOKENS), answer(drifted)))
    assert result.status is Status.FAIL
    assert blocking(result) == ["numerics"]
    assert any(f.probe == "noise-floor" for f in result.findings)


def test_garbage_text_that_the_baseline_finds_improbable_fails_on_cross_nll() -> None:
    cross = CrossScore(
        baseline_on_baseline=0.4,
        baseline_on_candidate=8.7,
        candidate_on_candidate=0.1,
        candidate_on_baseline=6.0,
    )
    same_tokens = answer(OK_TOKENS)
    result = judge(observe(same_tokens, answer(OK_TOKENS, text="OK,,,,,,,,"), cross=cross))
    assert result.status is Status.FAIL
    assert blocking(result) == ["numerics"]
    assert result.metrics["cross_nll_excess_max_nats"] == pytest.approx(8.3)


@pytest.mark.parametrize(
    "candidate",
    [
        answer((TokenLogprob("O", math.nan),)),
        Completion(status=200, error=RequestError(ErrorCategory.NON_FINITE_LOGPROB, "logprob nan")),
    ],
    ids=["nan-in-the-logprobs", "client-reported-non-finite"],
)
def test_nan_logprobs_fail_critically(candidate: Completion) -> None:
    result = judge(observe(answer(OK_TOKENS), candidate))
    assert result.status is Status.FAIL
    assert [f.severity for f in result.findings if f.blocking] == [Severity.CRITICAL]
    assert blocking(result) == ["non_finite"]


def test_missing_logprobs_are_inconclusive_not_a_pass() -> None:
    result = judge(observe(answer(None, "OK"), answer(None, "OK")))
    assert result.status is Status.INCONCLUSIVE
    assert any(f.category == "inconclusive" for f in result.findings)


def test_zero_prompts_are_inconclusive() -> None:
    result = judge()
    assert result.status is Status.INCONCLUSIVE
    assert result.metrics["probes"] == 0


def test_embeddings_below_the_cosine_threshold_fail() -> None:
    base = Embeddings(status=200, vectors=((1.0, 0.0, 0.0),))
    cand = Embeddings(status=200, vectors=((0.9, 0.3, 0.0),))
    result = judge(observe(answer(OK_TOKENS), answer(OK_TOKENS)), embeddings=(base, cand))
    assert result.status is Status.FAIL
    assert blocking(result) == ["embedding_drift"]


def test_embeddings_the_baseline_cannot_serve_are_reported_as_inconclusive() -> None:
    base = Embeddings(status=400, error=RequestError(ErrorCategory.REJECTED, "no embeddings"))
    result = judge(observe(answer(OK_TOKENS), answer(OK_TOKENS)), embeddings=(base, None))
    assert result.status is Status.PASS
    assert result.metrics["embedding_min_cosine"] is None
    notes = [f.message for f in result.findings if f.probe == "embeddings"]
    assert notes == ["no baseline embeddings (rejected: no embeddings)"]


def test_a_candidate_error_where_the_baseline_answered_blocks() -> None:
    failed = Completion(status=500, error=RequestError(ErrorCategory.SERVER, "boom", status=500))
    result = judge(observe(answer(OK_TOKENS), failed))
    assert blocking(result) == ["request_error"]
