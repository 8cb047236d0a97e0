"""The sampling gate's judgement on plain data: simulated servers that sample correctly, and with
each bug the gate is for (FAULTS.md 67-69)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from servegate.config.models import Policy
from servegate.endpoints.types import Completion, TokenLogprob
from servegate.gates.sampling import evaluate
from servegate.gates.sampling.first_token import reported
from servegate.gates.sampling.plan import NEUTRALS, SideSetup
from servegate.verdict.model import GateResult, Outcome, Severity, Status

from .simulated import Server, evidence


def outcomes(result: GateResult) -> dict[str, Outcome]:
    return {c.name: c.outcome for c in result.checks}


def judged(baseline: Server, candidate: Server) -> GateResult:
    return evaluate(evidence(baseline, candidate), Policy())


def test_two_servers_that_sample_as_they_report_pass_with_a_power_statement_on_every_check() -> (
    None
):
    result = judged(Server(seed=1), Server(seed=2))
    assert result.status is Status.PASS, result.summary
    # seeds and n > 1 are equalities, with nothing to state a power of
    exact = ("logprobs_mode", "hangs", "seed", "choices")
    measured = [c for c in result.checks if c.name not in exact]
    assert all(c.outcome is Outcome.PASS for c in measured), outcomes(result)
    for c in measured:
        # the production-settings checks (verdict/sampled_checks.py) word it as replay does
        stated = "; power: " if c.name.startswith("sampled_") else "is detected with probability"
        assert stated in c.limit, c
    assert result.metrics["baseline_logprobs_mode"] == "raw"


@pytest.mark.parametrize(
    ("candidate", "failing"),
    [
        pytest.param(Server(greedy=True), {"reference_fit", "temperature_1.5", "top_p", "top_k",
                                           "min_p", "homogeneity"}, id="served-greedily"),
        pytest.param(Server(temperature=0.7, seed=3),
                     {"reference_fit", "temperature_1.5", "homogeneity"}, id="temperature-default"),
        pytest.param(Server(ignore=("top_p", "top_k", "min_p"), seed=3),
                     {"top_p", "top_k", "min_p"}, id="truncations-dropped"),
        pytest.param(Server(narrow_top_p=0.3, seed=3), {"top_p"}, id="nucleus-narrowed"),
        pytest.param(Server(processed=True, seed=3), {"logprobs_mode"}, id="processed-logprobs"),
    ],
)  # fmt: skip
def test_a_candidate_with_a_broken_sampler_fails_the_checks_that_see_it(
    candidate: Server, failing: set[str]
) -> None:
    result = judged(Server(seed=1), candidate)
    assert result.status is Status.FAIL
    failed = {name for name, outcome in outcomes(result).items() if outcome is Outcome.FAIL}
    assert failing <= failed, outcomes(result)
    blocking = [f for f in result.findings if f.blocking]
    assert blocking
    assert all(f.side == "candidate" for f in blocking)
    assert any(f.curl and '"max_tokens": 1' in f.curl for f in blocking)


def test_a_draw_outside_the_kept_set_is_named_in_the_finding() -> None:
    result = judged(Server(seed=1), Server(ignore=("top_k",), seed=3))
    assert outcomes(result)["top_k"] is Outcome.FAIL
    finding = next(f for f in result.findings if f.category == "sampling_top_k")
    assert "outside the kept set" in finding.message


def test_a_baseline_whose_sampler_misses_its_report_is_reported_and_never_blocks() -> None:
    result = judged(Server(temperature=0.7, seed=1), Server(seed=2))
    assert result.status is Status.PASS, result.summary
    assert outcomes(result)["reference_fit"] is Outcome.PASS
    info = [f for f in result.findings if f.side == "baseline"]
    assert info
    assert all(f.severity is Severity.INFO for f in info)
    assert "the baseline's own sampler" in info[0].message
    # Its draws are no reference for the candidate's either.
    assert outcomes(result)["homogeneity"] is Outcome.NOT_MEASURED


def test_when_both_samplers_miss_their_reports_the_check_is_not_measured_not_failed() -> None:
    result = judged(Server(temperature=0.7, seed=1), Server(temperature=0.7, seed=2))
    assert outcomes(result)["reference_fit"] is Outcome.NOT_MEASURED
    assert result.status is Status.PASS
    assert any("both sides fail" in item for item in result.not_measured)


def test_a_parameter_the_baseline_refuses_is_not_applicable_and_listed() -> None:
    result = judged(Server(refuse=("min_p",), seed=1), Server(seed=2))
    assert outcomes(result)["min_p"] is Outcome.NOT_APPLICABLE
    assert any("refuses min_p" in item and "400" in item for item in result.not_applicable)


def test_a_parameter_the_candidate_refuses_where_the_baseline_samples_with_it_fails() -> None:
    result = judged(Server(seed=1), Server(refuse=("top_k",), seed=2))
    assert outcomes(result)["top_k"] is Outcome.FAIL
    assert result.status is Status.FAIL


def test_without_logprobs_on_the_baseline_only_the_two_sample_test_is_measured() -> None:
    ev = evidence(Server(logprobs=False, seed=1), Server(logprobs=False, seed=2))
    result = evaluate(ev, Policy())
    got = outcomes(result)
    assert got["reference_fit"] is Outcome.NOT_APPLICABLE
    assert got["top_p"] is Outcome.NOT_APPLICABLE
    assert got["homogeneity"] is Outcome.PASS
    assert result.status is Status.PASS


def test_two_sides_drawing_from_different_distributions_fail_the_two_sample_test() -> None:
    # Each samples as it reports, but the candidate's model is another: only homogeneity sees it.
    other = {t: p for t, p in Server().probs.items()}
    other["The"], other["A"] = other["A"], other["The"]
    result = judged(Server(seed=1), Server(probs=other, seed=2))
    assert outcomes(result)["homogeneity"] is Outcome.FAIL
    assert outcomes(result)["reference_fit"] is Outcome.PASS


def test_a_baseline_whose_own_halves_differ_leaves_the_two_sample_test_unmeasured() -> None:
    ev = evidence(Server(seed=1), Server(seed=2))
    first = ev.cells[0]
    top = first.baseline[0]
    # The baseline draws its top token first and never after: not one distribution.
    skewed = tuple(top if i % 2 == 0 else _other(d, top) for i, d in enumerate(first.baseline))
    cells = (replace(first, baseline=skewed), *ev.cells[1:])
    result = evaluate(replace(ev, cells=cells), Policy())
    assert outcomes(result)["homogeneity"] is Outcome.NOT_MEASURED
    assert any("halves differ" in item for item in result.not_measured)


def _other(draw: Completion, avoid: Completion) -> Completion:
    return draw if draw.content != avoid.content else replace(draw, content="zz", logprobs=(
        TokenLogprob("zz", -9.0, draw.logprobs[0].top if draw.logprobs else ()),))  # fmt: skip


def test_the_report_leaves_out_a_sampled_token_appended_to_the_top_list() -> None:
    server = Server(seed=5)
    draws = [server.draw({"temperature": 1.0}) for _ in range(200)]
    report = reported(draws)
    assert report is not None
    assert len(report.tokens) == 20
    assert any(len(d.logprobs[0].top) == 21 for d in draws if d.logprobs)


def test_a_side_with_no_draws_back_is_not_measured() -> None:
    ev = evidence(Server(seed=1), Server(seed=2))
    empty = tuple(replace(cd, candidate=()) for cd in ev.cells)
    longer = tuple(replace(d, candidate=()) for d in ev.sequences)
    setup = {**ev.setup, "candidate": SideSetup(NEUTRALS[0], False)}
    result = evaluate(replace(ev, cells=empty, sequences=longer, setup=setup), Policy())
    assert outcomes(result)["reference_fit"] is Outcome.NOT_MEASURED
    assert outcomes(result)["hangs"] is Outcome.NOT_MEASURED


@pytest.mark.parametrize(
    ("candidate", "failing"),
    [
        pytest.param(Server(seeds=False, seed=2), "seed", id="seed-dropped"),
        pytest.param(Server(choices="collapsed", seed=2), "choices", id="n-collapsed"),
        pytest.param(Server(choices="one", seed=2), "choices", id="n-ignored"),
        # refused (HTTP 400) where the baseline served it: a lost feature, not "not measured"
        pytest.param(Server(choices="refused", seed=2), "choices", id="n-refused"),
        pytest.param(Server(penalties=False, seed=2), "frequency_penalty", id="penalties-stripped"),
    ],
)
def test_longer_answers_fail_where_the_candidate_drops_what_the_baseline_honours(
    candidate: Server, failing: str
) -> None:
    result = judged(Server(seed=1), candidate)
    assert outcomes(result)[failing] is Outcome.FAIL, result.summary
    finding = next(f for f in result.findings if f.category == f"sampling_{failing}")
    assert finding.curl is not None
    assert finding.side == "candidate"


def test_a_baseline_that_never_reproduces_a_seed_or_offers_n_leaves_both_not_applicable() -> None:
    # llama-cpp-python 0.3.16: a seed does not reproduce, n > 1 answers one choice.
    result = judged(Server(seeds=False, choices="one", seed=1), Server(seeds=False, seed=2))
    got = outcomes(result)
    assert got["seed"] is Outcome.NOT_APPLICABLE
    assert got["choices"] is Outcome.NOT_APPLICABLE
    assert any("does not reproduce a seed" in item for item in result.not_applicable)
    assert any("does not offer n > 1" in item for item in result.not_applicable)
    assert result.status is Status.PASS


def test_a_penalty_without_effect_on_the_baseline_is_not_measured() -> None:
    result = judged(Server(penalties=False, seed=1), Server(penalties=False, seed=2))
    assert outcomes(result)["presence_penalty"] is Outcome.NOT_MEASURED
    assert result.status is Status.PASS
