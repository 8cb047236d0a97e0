import math
import random

import pytest

from servegate.config.models import Policy
from servegate.endpoints.errors import ErrorCategory, RequestError
from servegate.endpoints.types import Completion, TokenLogprob, Usage
from servegate.gates.numerics import NumericsEvidence, evaluate
from servegate.gates.numerics.echo_route import EchoCheck
from servegate.gates.numerics.noise import NoiseFloor, PathComparison, ProbeRequest
from servegate.gates.numerics.perplexity import CrossEcho, TextScore
from servegate.gates.numerics.plan import PromptObservation
from servegate.gates.tokens import compare
from servegate.stats.distribution import DistributionSummary
from servegate.verdict.model import GateResult, Severity, Status

OK_TOKENS = (
    TokenLogprob("O", -0.05, (("O", -0.05), ("Ok", -3.2), ("Yes", -4.0))),
    TokenLogprob("K", -0.01, (("K", -0.01), ("k", -5.0))),
)
ALIGNED = {"baseline": EchoCheck.aligned(), "candidate": EchoCheck.aligned()}
# Stock llama-cpp-python on a model without BOS: one token late as returned, exact shifted.
LATE = EchoCheck(offered=True, errors_nats={0: 13.7, 1: 0.0}, tokens=6)
GARBAGE = EchoCheck(offered=True, errors_nats={0: 13.7, 1: 9.2}, tokens=6)
WORDS = [f" w{i}" for i in range(400)]


def answer(tokens: tuple[TokenLogprob, ...] | None, text: str | None = None) -> Completion:
    content = text if text is not None else "".join(t.token for t in tokens or ())
    return Completion(status=200, content=content, logprobs=tokens)


def observe(
    baseline: Completion, candidate: Completion, probe: str = "canary", **kw: CrossEcho
) -> PromptObservation:
    body = {"messages": [{"role": "user", "content": "Say OK"}], "max_tokens": 24}
    return PromptObservation(ProbeRequest(probe, "chat", body), baseline, candidate, **kw)


def echoed(nlls: list[float], tokens: list[str] = WORDS) -> Completion:
    """A reference text echoed with logprobs: the first token has none (no context)."""
    entries = (None, *(TokenLogprob(t, -x) for t, x in zip(tokens, nlls, strict=False)))
    return Completion(status=200, content="", prompt_logprobs=entries)


def texts(shift: float = 0.0, noise: float = 0.05, seed: int = 7) -> tuple[TextScore, ...]:
    """Two reference texts, the candidate's per-token NLL = baseline's + shift + noise."""
    rng = random.Random(seed)
    out = []
    for name in ("en", "zh"):
        base = [rng.uniform(0.5, 4.0) for _ in WORDS]
        cand = [x + shift + rng.gauss(0.0, noise) for x in base]
        out.append(TextScore(name, echoed(base), echoed(cand)))
    return tuple(out)


def judge(
    *observations: PromptObservation,
    noise: NoiseFloor | None = None,
    scores: tuple[TextScore, ...] | None = None,
    alignment: dict[str, EchoCheck] = ALIGNED,
    strict: bool = False,
) -> GateResult:
    evidence = NumericsEvidence(
        observations=observations,
        noise=noise or NoiseFloor.zero(),
        baseline_url="http://127.0.0.1:1/v1",
        candidate_url="http://127.0.0.1:2/v1",
        model="m",
        echo=alignment,
        texts=texts() if scores is None else scores,
    )
    return evaluate(evidence, Policy(), strict=strict)


def blocking(result: GateResult) -> list[str]:
    return [f.category for f in result.findings if f.blocking]


def outcome(result: GateResult, name: str) -> str:
    return str(next(c.outcome for c in result.checks if c.name == name))


def floor_of(*pairs: tuple[str, tuple[TokenLogprob, ...], tuple[TokenLogprob, ...]]) -> NoiseFloor:
    comparisons = tuple(PathComparison(path, compare("p", a, b)) for path, a, b in pairs)
    return NoiseFloor(comparisons, DistributionSummary.from_values(()))


def test_identical_outputs_and_an_unmoved_distribution_pass() -> None:
    result = judge(observe(answer(OK_TOKENS), answer(OK_TOKENS)), scores=texts(noise=0.0))
    assert result.status is Status.PASS
    assert result.metrics["exact_match_rate"] == 1.0
    assert result.metrics["mean_abs_dlogprob_nats"] == 0.0
    assert outcome(result, "perplexity_shift") == "pass"


def test_a_near_tie_flip_after_a_common_prefix_is_benign_and_explained() -> None:
    prefix = OK_TOKENS  # both sides agree on "OK" first, within 0.02 nats
    base = (*prefix, TokenLogprob("Yes", -0.60, (("Yes", -0.60), ("No", -0.85))))
    cand_prefix = tuple(TokenLogprob(t.token, t.logprob - 0.02, t.top) for t in prefix)
    cand = (*cand_prefix, TokenLogprob("No", -0.62, (("No", -0.62), ("Yes", -0.65))))
    result = judge(observe(answer(base), answer(cand)))
    assert result.status is Status.PASS
    # |Δ| 0.02 on each prefix token and 0.05 for "Yes" at the flip, where the context is shared
    assert result.metrics["mean_abs_dlogprob_nats"] == pytest.approx((0.02 + 0.02 + 0.05) / 3)
    assert (result.metrics["near_tie_flips"], result.metrics["confident_flips"]) == (1, 0)
    (div,) = result.divergences
    assert (div.explanation, div.baseline_token, div.candidate_token) == ("near-tie", "Yes", "No")
    assert div.token_index == 2
    assert div.gap_nats == pytest.approx(0.25)
    assert (div.candidate_in_baseline_top_k, div.baseline_in_candidate_top_k) == (True, True)


def test_the_same_flip_with_a_drifted_prefix_fails_on_drift_not_on_the_flip() -> None:
    base = (*OK_TOKENS, TokenLogprob("Yes", -0.60, (("Yes", -0.60), ("No", -0.85))))
    shifted = tuple(TokenLogprob(t.token, t.logprob - 0.4, t.top) for t in OK_TOKENS)
    cand = (*shifted, TokenLogprob("No", -0.62, (("No", -0.62), ("Yes", -0.65))))
    result = judge(observe(answer(base), answer(cand)))
    assert result.status is Status.FAIL
    assert outcome(result, "prefix_dlogprob") == "fail"
    assert outcome(result, "confident_flips") == "pass"


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
    assert '"model": "m"' in finding.curl  # the reproducer runs as printed
    assert result.divergences[0].blocking


def test_a_flip_the_baseline_also_makes_against_itself_is_within_the_noise() -> None:
    base = (TokenLogprob("Yes", -0.3, (("Yes", -0.3), ("No", -1.5))),)
    cand = (TokenLogprob("No", -0.4, (("No", -0.4), ("Yes", -1.2))),)
    result = judge(observe(answer(base), answer(cand)), noise=floor_of(("cache-hit", base, cand)))
    assert result.status is Status.PASS
    assert result.metrics["near_tie_limit_nats"] == pytest.approx(1.2)


def test_prefix_drift_beyond_the_tolerance_fails_and_the_missing_floor_is_listed() -> None:
    drifted = tuple(TokenLogprob(t.token, t.logprob - 0.3, t.top) for t in OK_TOKENS)
    result = judge(observe(answer(OK_TOKENS), answer(drifted)))
    assert result.status is Status.FAIL
    assert outcome(result, "prefix_dlogprob") == "fail"
    assert any(n.startswith("the baseline's noise floor") for n in result.not_measured)


def test_prefix_drift_within_k_times_the_path_noise_plus_tolerance_passes() -> None:
    drifted = tuple(TokenLogprob(t.token, t.logprob - 0.3, t.top) for t in OK_TOKENS)
    own = tuple(TokenLogprob(t.token, t.logprob - 0.1, t.top) for t in OK_TOKENS)
    result = judge(
        observe(answer(OK_TOKENS), answer(drifted)),
        noise=floor_of(("cache-hit", OK_TOKENS, own)),
    )
    assert result.status is Status.PASS  # 0.3 ≤ 3 × 0.1 + 0.1
    check = next(c for c in result.checks if c.name == "prefix_dlogprob")
    assert check.limit.startswith("≤ 0.4000 nats (3 × floor 0.1000 + tolerance 0.1)")


def scored(text: str, nll: float, prompt_nll: float = 3.0) -> Completion:
    """An echo of "Say OK" + "\n" + `text`, each character of `text` one token at `nll`."""
    head = (None, TokenLogprob("Say", -prompt_nll, (("Say", -prompt_nll),)))
    tail = tuple(TokenLogprob(ch, -nll, ((ch, -nll),)) for ch in f"\n{text}")
    return Completion(status=200, content="", prompt_logprobs=(*head, *tail))


def cross_echo(
    b_text: str, c_text: str, bb: float, bc: float, cc: float | None, cb: float | None
) -> CrossEcho:
    return CrossEcho(
        b_text,
        c_text,
        scored(b_text, bb),
        scored(c_text, bc),
        None if cc is None else scored(c_text, cc),
        None if cb is None else scored(b_text, cb),
    )


def test_garbage_text_that_the_baseline_finds_improbable_fails_on_cross_nll() -> None:
    cross = cross_echo("OK", "OK,,,,,,,,", bb=0.4, bc=8.7, cc=0.1, cb=6.0)
    same_tokens = answer(OK_TOKENS)
    result = judge(observe(same_tokens, answer(OK_TOKENS, text="OK,,,,,,,,"), cross=cross))
    assert result.status is Status.FAIL
    assert blocking(result) == ["numerics"]
    assert result.metrics["cross_nll_excess_max_nats"] == pytest.approx(8.3)
    assert result.metrics["teacher_forced_dnll_nats"] == pytest.approx(5.6)


def test_cross_scoring_never_reads_echo_logprobs_that_failed_their_alignment() -> None:
    # The issue-18 false alarm: a stock server's unshifted echo made a near-tie divergence look
    # 2.9 nats/token worse. Misaligned by every shift: the excess is not measured, never judged.
    cross = cross_echo("OK", "Ok", bb=0.4, bc=3.3, cc=0.4, cb=3.3)
    result = judge(
        observe(answer(OK_TOKENS), answer(OK_TOKENS, text="Ok"), cross=cross),
        alignment={"baseline": GARBAGE, "candidate": GARBAGE},
    )
    check = next(c for c in result.checks if c.name == "cross_nll_excess")
    assert check.outcome == "not-measured"
    assert "not aligned by any shift" in check.reason
    assert blocking(result) == []
    assert result.metrics["cross_nll_excess_max_nats"] is None


def test_cross_scoring_reads_a_late_echo_through_the_one_token_shift() -> None:
    # Entries as a stock llama-cpp-python returns them for a model without BOS: entry i carries
    # token i with the top-k of position i+1. Shifted, "O" then "K" are scored from the
    # previous entry's top-k: exact, 0.2 nats/token; as returned they would read 5.0.
    def late(*tokens: tuple[str, float]) -> Completion:
        entries: list[TokenLogprob | None] = [None]
        for (tok, _), (_, nxt_lp) in zip(tokens, (*tokens[1:], ("", -1.0)), strict=True):
            nxt = tokens[len(entries)][0] if len(entries) < len(tokens) else "."
            entries.append(TokenLogprob(tok, -5.0, ((nxt, nxt_lp),)))
        return Completion(status=200, content="", prompt_logprobs=tuple(entries))

    base = late(("Say", -3.0), ("\n", -0.2), ("O", -0.2), ("K", -0.2))
    cross = CrossEcho("OK", "OK!", base, base, None, None)
    result = judge(
        observe(answer(OK_TOKENS), answer(OK_TOKENS, text="OK!"), cross=cross),
        alignment={"baseline": LATE, "candidate": LATE},
    )
    assert result.metrics["baseline_scoring_route"] == "echo-shifted"
    assert result.metrics["cross_nll_excess_max_nats"] == pytest.approx(0.0)


def test_a_systematic_perplexity_shift_fails_even_when_greedy_tokens_are_identical() -> None:
    # A wrong logit scale: every answer's argmax unchanged, every distribution flatter.
    result = judge(observe(answer(OK_TOKENS), answer(OK_TOKENS)), scores=texts(shift=0.07))
    assert result.status is Status.FAIL
    assert outcome(result, "perplexity_shift") == "fail"
    assert result.metrics["perplexity_shift_z"] > 3.0
    assert result.metrics["perplexity_tokens"] == 2 * len(WORDS)


def test_a_significant_but_tiny_shift_is_within_the_tolerance() -> None:
    scores = texts(shift=0.005, noise=0.01)
    result = judge(observe(answer(OK_TOKENS), answer(OK_TOKENS)), scores=scores)
    assert result.metrics["perplexity_shift_z"] > 3.0
    assert result.status is Status.PASS


def test_a_better_candidate_never_fails_on_perplexity() -> None:
    result = judge(observe(answer(OK_TOKENS), answer(OK_TOKENS)), scores=texts(shift=-0.2))
    assert outcome(result, "perplexity_shift") == "pass"


def test_misaligned_echo_logprobs_leave_perplexity_unmeasured_and_the_gate_inconclusive() -> None:
    # Echo logprobs that no shift aligns with the generation logprobs: not measured, core.
    result = judge(
        observe(answer(OK_TOKENS), answer(OK_TOKENS)),
        alignment={"baseline": GARBAGE, "candidate": GARBAGE},
    )
    assert result.status is Status.INCONCLUSIVE
    assert "not aligned by any shift" in result.summary
    assert outcome(result, "perplexity_shift") == "not-measured"


def test_a_team_that_does_not_require_perplexity_gets_a_verdict_on_tokens_and_margins() -> None:
    from servegate.config.models import NumericsPolicy

    evidence = NumericsEvidence(
        observations=(observe(answer(OK_TOKENS), answer(OK_TOKENS)),),
        noise=NoiseFloor.zero(),
        baseline_url="http://127.0.0.1:1/v1",
        candidate_url="http://127.0.0.1:2/v1",
        model="m",
        echo={"baseline": GARBAGE, "candidate": GARBAGE},
        texts=texts(),
    )
    policy = Policy(numerics=NumericsPolicy(require=("token_comparison", "prefix_dlogprob")))
    result = evaluate(evidence, policy)
    assert result.status is Status.PASS
    assert outcome(result, "perplexity_shift") == "not-measured"
    assert any("not aligned" in n for n in result.not_measured)
    assert evaluate(evidence, policy, strict=True).status is Status.INCONCLUSIVE


def test_a_server_without_echo_logprobs_is_not_applicable_not_inconclusive() -> None:
    none = EchoCheck.not_offered("returns no completion logprobs")
    result = judge(
        observe(answer(OK_TOKENS), answer(OK_TOKENS)),
        alignment={"baseline": ALIGNED["baseline"], "candidate": none},
    )
    assert outcome(result, "perplexity_shift") == "not-applicable"
    assert result.status is Status.PASS
    assert any("returns no completion logprobs" in n for n in result.not_applicable)
    strict = judge(
        observe(answer(OK_TOKENS), answer(OK_TOKENS)),
        alignment={"baseline": ALIGNED["baseline"], "candidate": none},
        strict=True,
    )
    assert not any("perplexity" in n for n in strict.not_measured)  # never a gap, strict or not


def as_stock_echo(aligned: Completion) -> Completion:
    """The same scores laid out as stock llama-cpp-python echoes them on a model without BOS:
    entry i carries token i, a wrong value, and the top-k of position i+1 (the first entry, as
    the API wants, none: so position 1 cannot be scored)."""
    entries = aligned.prompt_logprobs or ()
    late: list[TokenLogprob | None] = []
    for i, e in enumerate(entries):
        nxt = entries[i + 1] if i + 1 < len(entries) else None
        top = ((nxt.token, nxt.logprob),) if nxt is not None else ()
        late.append(TokenLogprob(e.token if e else "<s>", -9.0, top) if i else None)
    return Completion(status=200, content="", prompt_logprobs=tuple(late))


def test_a_late_echo_is_read_shifted_and_gives_the_aligned_shift() -> None:
    aligned = texts(shift=0.07)
    expected = judge(observe(answer(OK_TOKENS), answer(OK_TOKENS)), scores=aligned)
    assert expected.metrics["baseline_scoring_route"] == "echo"
    late = tuple(
        TextScore(t.text_id, as_stock_echo(t.baseline), as_stock_echo(t.candidate)) for t in aligned
    )
    shifted = judge(
        observe(answer(OK_TOKENS), answer(OK_TOKENS)),
        scores=late,
        alignment={"baseline": LATE, "candidate": LATE},
    )
    assert shifted.metrics["candidate_scoring_route"] == "echo-shifted"
    assert shifted.metrics["candidate_echo_alignment_nats"] == 13.7
    assert shifted.metrics["candidate_echo_calibrated_nats"] == 0.0
    # the same tokens' scores but the first of each text (no top-k before it): ~the same shift
    assert shifted.metrics["perplexity_shift_nats"] == pytest.approx(
        expected.metrics["perplexity_shift_nats"],
        abs=1e-3,  # type: ignore[arg-type]
    )
    assert shifted.metrics["perplexity_tokens"] == expected.metrics["perplexity_tokens"] - 2
    assert outcome(shifted, "perplexity_shift") == "fail"
    ppl = next(c for c in shifted.checks if c.name == "perplexity_shift")
    assert "aligned after a one-token shift (13.700 → 0.000" in ppl.baseline
    # The same late echo read as returned, had nothing checked it, is garbage: it is not read.
    unchecked = judge(
        observe(answer(OK_TOKENS), answer(OK_TOKENS)),
        scores=late,
        alignment={"baseline": GARBAGE, "candidate": GARBAGE},
    )
    assert outcome(unchecked, "perplexity_shift") == "not-measured"


def test_texts_tokenized_differently_are_not_compared_and_say_so() -> None:
    base, cand = echoed([1.0] * 50), echoed([1.0] * 50, tokens=[f" v{i}" for i in range(50)])
    result = judge(observe(answer(OK_TOKENS), answer(OK_TOKENS)),
                   scores=(TextScore("en", base, cand),))  # fmt: skip
    assert result.status is Status.INCONCLUSIVE
    assert result.details["perplexity"]["texts_tokenized_differently"] == ["en"]


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
    assert any("no token logprobs" in n for n in result.not_measured)


def test_zero_prompts_are_inconclusive() -> None:
    result = judge()
    assert result.status is Status.INCONCLUSIVE
    assert result.metrics["probes"] == 0


def test_a_side_that_stopped_early_is_listed_not_passed() -> None:
    result = judge(observe(answer(OK_TOKENS), answer(OK_TOKENS[:1])))
    assert result.status is Status.PASS  # nothing measured contradicts it …
    assert any(n.startswith("divergences where one side stopped") for n in result.not_measured)
    # … but a strict run does not pass on it
    strict = judge(observe(answer(OK_TOKENS), answer(OK_TOKENS[:1])), strict=True)
    assert strict.status is Status.INCONCLUSIVE


def test_a_candidate_timeout_is_a_hang_not_a_numerics_verdict() -> None:
    hung = Completion(status=None, error=RequestError(ErrorCategory.TIMEOUT, "no headers"))
    result = judge(observe(answer(OK_TOKENS), hung), observe(answer(OK_TOKENS), answer(OK_TOKENS)))
    assert result.status is Status.FAIL
    assert blocking(result) == ["timeout"]
    assert outcome(result, "hangs") == "fail"
    assert outcome(result, "confident_flips") == "pass"


def test_a_candidate_error_where_the_baseline_answered_blocks() -> None:
    failed = Completion(status=500, error=RequestError(ErrorCategory.SERVER, "boom", status=500))
    result = judge(observe(answer(OK_TOKENS), failed))
    assert blocking(result) == ["request_error"]
    assert result.status is Status.FAIL


def test_a_candidate_without_logprobs_is_still_judged_on_its_text_scored_by_the_baseline() -> None:
    # transformers serve returns no logprobs: only the baseline can score the divergent text.
    cross = cross_echo("OK", "OK,,,,,,,,", bb=0.4, bc=8.7, cc=None, cb=None)
    bare = Completion(status=200, content="OK,,,,,,,,")
    result = judge(
        observe(answer(OK_TOKENS), bare, cross=cross),
        alignment={"baseline": ALIGNED["baseline"], "candidate": EchoCheck.not_offered("x")},
    )
    assert result.status is Status.FAIL
    assert blocking(result) == ["numerics"]
    assert result.metrics["cross_nll_excess_max_nats"] == pytest.approx(8.3)
    assert result.metrics["teacher_forced_dnll_nats"] is None


def test_divergent_texts_that_could_not_be_scored_are_not_called_identical() -> None:
    bare = Completion(status=200, content="Something else entirely")
    result = judge(
        observe(answer(OK_TOKENS), bare, probe="count"),
        alignment={"baseline": GARBAGE, "candidate": GARBAGE},
    )
    check = next(c for c in result.checks if c.name == "cross_nll_excess")
    assert check.outcome == "not-measured"
    assert check.reason.startswith("1 greedy answer(s) differ in text (count), but echo")
    assert "no greedy answer diverged" not in check.reason


def test_no_probe_sent_to_the_candidate_measures_no_hangs_errors_or_nan() -> None:
    # Issue 20 item 13: zero comparisons counted as zero hangs, zero errors, no NaN: a pass.
    not_sent = Completion(status=None, error=RequestError(ErrorCategory.NOT_SENT, "hung earlier"))
    result = judge(observe(answer(OK_TOKENS), not_sent))
    for name in ("hangs", "request_errors", "non_finite"):
        assert outcome(result, name) == "not-measured", name
    assert result.status is Status.INCONCLUSIVE


def _with_prompt(c: Completion, tokens: int) -> Completion:
    usage = Usage(prompt_tokens=tokens, completion_tokens=2, total_tokens=tokens + 2)
    return Completion(status=200, content=c.content, logprobs=c.logprobs, usage=usage)


def test_the_same_messages_rendered_to_another_prompt_fail_with_the_counts() -> None:
    # Measured 2026-12-02, llama.cpp → vLLM: "What is the capital of France?" was 16 prompt
    # tokens on llama-cpp-python and 37 on vLLM (SmolLM2's HF template adds a default system
    # prompt); 3 of 12 chat answers parted at token 0 while the perplexity shift was −0.0004.
    same = answer(OK_TOKENS)
    result = judge(
        observe(_with_prompt(same, 16), _with_prompt(same, 37), probe="capital"),
        observe(_with_prompt(same, 20), _with_prompt(same, 41), probe="json"),
    )
    assert outcome(result, "chat_prompt") == "fail"
    [finding] = [f for f in result.findings if f.category == "chat_prompt"]
    assert "on 2 of 2 probes (+21 tokens; e.g. capital: 16 → 37 prompt tokens)" in finding.message
    assert finding.curl is not None
    assert result.status is Status.FAIL


def test_equal_prompt_counts_pass_and_missing_usage_is_not_measured() -> None:
    same = answer(OK_TOKENS)
    result = judge(observe(_with_prompt(same, 16), _with_prompt(same, 16)))
    assert outcome(result, "chat_prompt") == "pass"
    assert result.status is Status.PASS
    assert outcome(judge(observe(same, same)), "chat_prompt") == "not-measured"
