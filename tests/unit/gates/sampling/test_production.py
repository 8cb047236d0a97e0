"""Answers at production settings (temperature 0.7, top_p 0.9), repeated and judged pair by pair
as distributions: simulated servers, and the probes' answer checkers."""

from __future__ import annotations

import pytest

from servegate.config.models import Policy
from servegate.gates.sampling import SamplingPlan, evaluate
from servegate.gates.sampling.production import PROBES, SETTINGS, request
from servegate.verdict.model import GateResult, Outcome, Status

from .simulated import Server, evidence

CHECKERS = {pid: checker for pid, _, checker in PROBES}


def production(result: GateResult) -> dict[str, Outcome]:
    return {c.name: c.outcome for c in result.checks if c.name.startswith("sampled_")}


def test_two_servers_sampling_alike_pass_every_production_check_with_its_power() -> None:
    result = evaluate(evidence(Server(seed=1), Server(seed=2)), Policy())
    got = production(result)
    assert set(got) == {"sampled_success", "sampled_degenerate", "sampled_finish",
                        "sampled_length", "sampled_symbols", "sampled_openings"}  # fmt: skip
    assert all(o is Outcome.PASS for o in got.values()), got
    for c in result.checks:
        if c.name.startswith("sampled_"):
            assert "power" in c.limit, c


def test_a_candidate_answering_garbage_when_it_samples_fails_success_and_degeneration() -> None:
    result = evaluate(evidence(Server(seed=1), Server(garbage=True, seed=2)), Policy())
    got = production(result)
    for name in ("sampled_success", "sampled_degenerate", "sampled_finish", "sampled_symbols"):
        assert got[name] is Outcome.FAIL, (name, got)
    finding = next(f for f in result.findings if f.category == "sampling_sampled_success")
    assert finding.probe.startswith("production:")
    assert finding.candidate_excerpt is not None
    assert "!!!!!!!!" in finding.candidate_excerpt
    assert result.status is Status.FAIL


def test_a_candidate_that_answers_greedily_opens_every_answer_alike_and_fails_openings() -> None:
    result = evaluate(evidence(Server(seed=1), Server(greedy=True, seed=2)), Policy())
    got = production(result)
    assert got["sampled_openings"] is Outcome.FAIL
    assert got["sampled_success"] is Outcome.PASS  # right answers, one phrasing each


def test_a_plan_without_production_repeats_sends_none_and_lists_why() -> None:
    plan = SamplingPlan(production_repeats=0)
    ev = evidence(Server(seed=1), Server(seed=2), plan)
    assert not [d for d in ev.sequences if d.kind == "production"]
    assert not production(evaluate(ev, Policy()))


def test_the_probes_are_sent_with_the_production_settings_and_nothing_else() -> None:
    body = request("Reply with exactly the word OK.")
    assert {k: v for k, v in body.items() if k not in ("messages", "max_tokens")} == SETTINGS
    assert SETTINGS == {"temperature": 0.7, "top_p": 0.9}


@pytest.mark.parametrize(
    ("probe", "answer", "right"),
    [
        ("sum", "42", True),
        ("sum", "It is 42.", True),
        ("sum", "17 + 25 = 42", True),
        ("sum", "420", False),
        ("sum", "4.2", False),
        ("sum", "The answer is 43.", False),
        ("json", 'Sure: {"city": "Paris"}', True),
        ("json", '{"city": "Paris"', False),
        ("json", "[1, 2]", False),
        ("ok", "OK.", True),
        ("ok", " ok! ", True),
        ("ok", "OK, here you go", False),
    ],
)
def test_a_probe_checker_accepts_a_right_answer_however_phrased(
    probe: str, answer: str, right: bool
) -> None:
    checker = CHECKERS[probe]
    assert checker is not None
    assert checker(answer) is right


def test_the_metrics_say_where_the_requests_went_by_kind() -> None:
    result = evaluate(evidence(Server(seed=1), Server(seed=2)), Policy())
    named = [k for k in result.metrics if k.startswith("requests_") and k.endswith("_candidate")]
    kinds = {k: result.metrics[k] for k in named if k != "requests_candidate"}
    assert kinds == {
        "requests_first_token_candidate": 1104,  # 4 × (96 + 2 × 48) + 3 × 2 × 48 + 2 × 24
        "requests_seed_candidate": 9, "requests_choices_candidate": 3,
        "requests_penalty_candidate": 40, "requests_production_candidate": 50,
    }  # fmt: skip
    assert (
        sum(kinds.values()) == result.metrics["requests_candidate"]
    )  # the simulation has no pilot
    assert "seconds_first_tokens" in result.metrics
    assert "seconds_longer_answers" in result.metrics
