"""vLLM's own prompt scoring (`prompt_logprobs`), read from real vLLM 0.32.0 answers, equals its
echo path token for token, and is the route servegate prefers where a server answers it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from servegate.endpoints.http import OpenAIEndpoint
from servegate.endpoints.scripted import Conn, Request, ScriptedServer, reply_bytes, reply_json
from servegate.endpoints.types import TokenLogprob
from servegate.gates.numerics.echo_route import EchoCheck, choose
from servegate.gates.numerics.perplexity import native_body, scoring_body
from servegate.gates.pair import EndpointPair

DATA = Path(__file__).parents[3] / "data" / "vllm"


def _sample(name: str) -> dict[str, Any]:
    return dict(json.loads((DATA / name).read_text())["response"])


async def _prompt_logprobs(
    answer: dict[str, Any], body: dict[str, Any]
) -> tuple[TokenLogprob | None, ...] | None:
    async with ScriptedServer() as server:
        server.route("/v1/completions", reply_json(answer))
        async with OpenAIEndpoint("baseline", server.url) as ep:
            result = await ep.completion(body)
    assert result.ok, result.error
    return result.prompt_logprobs


async def test_vllm_native_prompt_logprobs_equal_its_echo_logprobs() -> None:
    text = json.loads((DATA / "completions-prompt-logprobs.json").read_text())["request"]["body"]
    native = await _prompt_logprobs(
        _sample("completions-prompt-logprobs.json"), native_body(text["prompt"])
    )
    echo_body = {"prompt": text["prompt"], "max_tokens": 1, "echo": True, "logprobs": 5}
    echoed = await _prompt_logprobs(_sample("completions-echo-logprobs.json"), echo_body)
    assert native is not None
    assert echoed is not None
    assert len(native) == len(echoed) == 70
    assert native[0] is None
    assert echoed[0] is None
    pairs = list(zip(native[1:], echoed[1:], strict=True))
    assert all(n is not None and e is not None and n.token == e.token for n, e in pairs)
    worst = max(abs(n.logprob - e.logprob) for n, e in pairs)  # type: ignore[union-attr]
    assert worst < 1e-4
    # the prompt token comes first, ranked wherever it fell (" old" at rank 434), then the top-5
    assert native[1] is not None
    assert (native[1].token, round(native[1].logprob, 3)) == (" old", -9.087)
    assert len(native[1].top) == 6


def test_the_native_route_is_preferred_and_checked_like_echo() -> None:
    check = EchoCheck(offered=True, errors_nats={0: 0.004, 1: 9.0}, native_nats=0.002)
    route = choose(check, 0.1)
    assert (route.name, route.shift) == ("native", 0)
    assert scoring_body(check, "t") == native_body("t")
    assert "prompt_logprobs" in route.describe()
    off = EchoCheck(offered=True, errors_nats={0: 0.004}, native_nats=3.0)
    assert choose(off, 0.1).name == "none"


@pytest.mark.parametrize("bad", [[None, "x"], [None, {"1": {"logprob": "nan?"}}], {"a": 1}])
async def test_garbage_native_prompt_logprobs_fail_the_request_never_crash(bad: Any) -> None:
    answer = {
        "choices": [{"index": 0, "text": "x", "finish_reason": "length", "prompt_logprobs": bad}]
    }
    async with ScriptedServer() as server:
        server.route("/v1/completions", reply_json(answer))
        async with OpenAIEndpoint("baseline", server.url) as ep:
            result = await ep.completion(native_body("hello"))
    assert not result.ok
    assert result.error is not None
    assert result.error.category == "schema"


async def test_nan_in_echo_logprobs_leaves_the_side_without_a_route_with_one_line() -> None:
    # Bad input (issue 18): a server whose echo logprobs hold NaN is not measured, never a crash
    # and never a verdict drawn from them.
    from servegate.gates.numerics.perplexity import alignment

    logprobs = {
        "tokens": [" Paris", "."],
        "token_logprobs": [-0.4, -0.9],
        "top_logprobs": [{" Paris": -0.4}, {".": -0.9}],
        "text_offset": [0, 6],
    }
    generated = {"choices": [{"index": 0, "text": " Paris.", "finish_reason": "length",
                              "logprobs": logprobs}]}  # fmt: skip
    echoed = (
        '{"choices": [{"index": 0, "text": "x", "finish_reason": "length", "logprobs": '
        '{"tokens": ["The", " capital", " Paris", "."], "token_logprobs": [null, NaN, -0.4, -0.9],'
        ' "top_logprobs": [null, {}, {}, {}], "text_offset": [0, 3, 11, 17]}}]}'
    )

    async def reply(request: Request, conn: Conn) -> None:
        if request.json().get("echo"):
            await reply_bytes(echoed.encode())(request, conn)
        else:
            await reply_json(generated)(request, conn)

    async with ScriptedServer() as server:
        server.route("/v1/completions", reply)
        async with OpenAIEndpoint("candidate", server.url) as ep:
            check = await alignment(EndpointPair(ep, ep, model="m"), ep, 5.0)
    route = choose(check, 0.1)
    assert route.name == "none"
    assert "non_finite_logprob" in route.reason
    assert "\n" not in route.reason


async def test_a_slow_scorer_scores_the_texts_one_by_one_within_the_budget() -> None:
    from servegate.gates.numerics.perplexity import LONG_TEXT_ID, reference_texts, score_texts

    answer = {"choices": [{"index": 0, "text": "x", "finish_reason": "length"}]}
    slow = EchoCheck(offered=True, errors_nats={0: 13.7, 1: 0.0}, seconds_per_char=0.2)
    async with ScriptedServer() as server:
        server.route("/v1/completions", reply_json(answer))
        async with (
            OpenAIEndpoint("baseline", server.url) as b,
            OpenAIEndpoint("candidate", server.url) as c,
        ):
            pair = EndpointPair(b, c, model="m")
            checks = {"baseline": slow, "candidate": slow}
            tight = await score_texts(pair, lambda n: 5.0, checks, budget_s=1e-6)
            ample = await score_texts(pair, lambda n: 5.0, checks, budget_s=3600.0)
    # 13,000 characters at 0.2 s each is far past the budget: never the joined text; the first
    # text always, then nothing that would not fit.
    assert [t.text_id for t in tight.texts] == [reference_texts()[0][0]]
    assert len(tight.skipped) == len(reference_texts()) - 1
    assert "1 of 8 reference texts scored" in tight.note
    assert [t.text_id for t in ample.texts] == [LONG_TEXT_ID]  # 2,600 s fits an hour
    assert ample.skipped == ()


def _scored_by_words(prompt: str, *, merge_first: bool) -> dict[str, Any]:
    """A native `prompt_logprobs` answer, one token per word; `merge_first` joins the first two
    words into one token, as another tokenizer would split the text."""
    import re

    words = re.findall(r"\s*\S+", prompt)
    if merge_first:
        words = [words[0] + words[1], *words[2:]]
    entries = [None] + [
        {str(i): {"logprob": -1.0 - (i % 3) / 10, "rank": 1, "decoded_token": w}}
        for i, w in enumerate(words[1:], start=1)
    ]
    return {"choices": [{"index": 0, "text": "x", "finish_reason": "length",
                         "prompt_logprobs": entries}]}  # fmt: skip


async def test_a_joined_text_that_splits_differently_is_scored_text_by_text() -> None:
    # Measured 2026-12-02 on the llama.cpp → vLLM migration: the joined reference text split
    # differently on the two sides and the perplexity shift was "not measured" without trying
    # the eight texts apart.
    from servegate.gates.numerics.echo_route import choose
    from servegate.gates.numerics.perplexity import (
        LONG_TEXT_ID,
        long_text,
        perplexity_shift,
        reference_texts,
        score_texts,
    )

    joined = long_text()[1]

    def answer(*, other_tokenizer: bool) -> Any:
        async def reply(request: Request, conn: Conn) -> None:
            prompt = request.json()["prompt"]
            merge = other_tokenizer and prompt == joined
            await reply_json(_scored_by_words(prompt, merge_first=merge))(request, conn)

        return reply

    native = EchoCheck(offered=True, errors_nats={0: 0.0}, native_nats=0.0)
    async with ScriptedServer() as bs, ScriptedServer() as cs:
        bs.route("/v1/completions", answer(other_tokenizer=False))
        cs.route("/v1/completions", answer(other_tokenizer=True))
        async with (
            OpenAIEndpoint("baseline", bs.url) as b,
            OpenAIEndpoint("candidate", cs.url) as c,
        ):
            pair = EndpointPair(b, c, model="m")
            scored = await score_texts(
                pair, lambda n: 5.0, {"baseline": native, "candidate": native}
            )
    ids = [t.text_id for t in scored.texts]
    assert LONG_TEXT_ID not in ids
    assert ids == [t for t, _ in reference_texts()]
    assert "the joined reference text tokenized differently" in scored.note
    assert "scored text by text" in scored.note
    route = choose(native, 0.1)
    shift = perplexity_shift(scored.texts, route, route)
    assert shift.texts_compared == tuple(ids)
    assert shift.texts_tokenized_differently == ()
    assert shift.shift.n > 1000
