"""The logit_bias check: a banned token never drawn, a forced one dominating — on simulated
servers, and the token ids from a server's own tokenizer over HTTP."""

from __future__ import annotations

from servegate.config.models import Policy
from servegate.endpoints.http import OpenAIEndpoint
from servegate.endpoints.scripted import Conn, Request, ScriptedServer, reply_json
from servegate.gates.sampling import SamplingPlan, evaluate
from servegate.gates.sampling.bias import candidates
from servegate.gates.sampling.plan import Reported
from servegate.gates.tokenizer import single_token
from servegate.verdict.model import GateResult, Outcome, Status

from .simulated import Server, distribution, evidence


def bias_of(result: GateResult) -> tuple[Outcome, str, str]:
    found = next(c for c in result.checks if c.name == "logit_bias")
    return found.outcome, found.reason, found.limit


def test_two_servers_that_honour_logit_bias_pass_with_the_power_of_the_ban() -> None:
    result = evaluate(evidence(Server(seed=1), Server(seed=2)), Policy())
    outcome, _, limit = bias_of(result)
    assert outcome is Outcome.PASS
    # the banned token is the report's most likely ('The', p 0.42): 24 draws without it rule
    # out an ignored ban with probability 1 - 0.58 ** 24
    assert "reported p 0.42" in limit
    assert "is detected with probability 1.000" in limit


def test_a_candidate_that_ignores_logit_bias_fails_with_the_banned_token_in_the_finding() -> None:
    result = evaluate(evidence(Server(seed=1), Server(bias=False, seed=2)), Policy())
    outcome, reason, _ = bias_of(result)
    assert outcome is Outcome.FAIL
    assert reason.startswith("banned 'The' drawn")
    assert "where the baseline's banned 'The' drawn 0/24" in reason
    finding = next(f for f in result.findings if f.category == "sampling_logit_bias")
    assert finding.side == "candidate"
    assert finding.curl is not None
    assert "logit_bias" in finding.curl
    assert result.status is Status.FAIL


def test_a_candidate_that_refuses_logit_bias_where_the_baseline_honours_it_fails() -> None:
    result = evaluate(evidence(Server(seed=1), Server(refuse=("logit_bias",), seed=2)), Policy())
    outcome, reason, _ = bias_of(result)
    assert outcome is Outcome.FAIL
    assert reason.startswith(
        "the candidate refuses logit_bias, which the baseline honours: HTTP 400"
    )


def test_a_baseline_that_ignores_logit_bias_does_not_offer_it_and_never_blocks() -> None:
    # llama-cpp-python's chat handler drops logit_bias: the reference engine's baseline is this
    result = evaluate(evidence(Server(bias=False, seed=1), Server(bias=False, seed=2)), Policy())
    outcome, reason, _ = bias_of(result)
    assert outcome is Outcome.NOT_APPLICABLE
    assert reason.startswith("the baseline ignores logit_bias (banned 'The' drawn")
    assert any("the baseline ignores logit_bias" in item for item in result.not_applicable)
    assert result.status is Status.PASS


def test_sides_whose_tokenizers_disagree_leave_the_check_not_measured() -> None:
    probs = distribution()
    shuffled = dict(reversed(list(probs.items())))  # the same tokens under other ids
    result = evaluate(evidence(Server(seed=1), Server(probs=shuffled, seed=2)), Policy())
    outcome, reason, _ = bias_of(result)
    assert outcome is Outcome.NOT_MEASURED
    assert "different ids" in reason


def test_a_plan_without_bias_draws_leaves_the_check_out() -> None:
    result = evaluate(
        evidence(Server(seed=1), Server(seed=2), SamplingPlan(bias_draws=0)), Policy()
    )
    assert "logit_bias" not in {c.name for c in result.checks}


def test_the_ban_goes_to_the_most_concentrated_prompt_and_the_force_to_its_rarest_token() -> None:
    reports = {
        "a": Reported(("x", "y", "z", " "), (0.30, 0.20, 0.005, 0.004)),
        "b": Reported(("p", "q", "r"), (0.60, 0.30, 0.009)),
    }
    found = candidates((("a", "A?"), ("b", "B?"), ("c", "C?")), reports)
    assert [c[0] for c in found] == ["b", "a"]  # "c" has no report
    assert found[0][2] == ("p", 0.60)
    assert found[1][3] == (("z", 0.005),)  # a blank token is never forced


async def test_a_token_id_comes_from_the_servers_tokenizer_without_its_bos() -> None:
    vocabulary = {"": [1], "The": [1, 504], "Piano": [1, 47, 2210]}  # a BOS on every text

    async def tokenize(request: Request, conn: Conn) -> None:
        await reply_json({"tokens": vocabulary[request.json()["input"]]})(request, conn)

    async with ScriptedServer() as server:
        server.route("/extras/tokenize", tokenize)  # llama-cpp-python's route
        async with OpenAIEndpoint("baseline", server.url) as ep:
            assert await single_token(ep, "m", "The", 5.0) == (504, "tokenized by /extras/tokenize")
            token_id, why = await single_token(ep, "m", "Piano", 5.0)
    assert token_id is None
    assert why == "'Piano' is 2 tokens, not one (tokenized by /extras/tokenize)"


async def test_a_server_without_a_tokenizer_gives_no_id_and_says_so() -> None:
    async with ScriptedServer() as server, OpenAIEndpoint("baseline", server.url) as ep:
        assert await single_token(ep, "m", "The", 5.0) == (
            None,
            "no tokenizer endpoint (/tokenize, /extras/tokenize)",
        )
