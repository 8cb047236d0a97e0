"""The over-long prompt is sized from what the servers say about their context."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from servegate.config.models import EndpointConfig, GateConfig
from servegate.endpoints.http import OpenAIEndpoint
from servegate.endpoints.scripted import ScriptedServer, reply_json
from servegate.gates.pair import EndpointPair
from servegate.gates.sizing import OVERSHOOT, ImpossibleSize, context_in_error, size

CFG = GateConfig(
    baseline=EndpointConfig(url="http://127.0.0.1:1/v1"),
    candidate=EndpointConfig(url="http://127.0.0.1:2/v1"),
    impossible_prompt_words=12_000,
)


def listing(**entry: object) -> dict[str, object]:
    return {"object": "list", "data": [{"id": "m", "object": "model", **entry}]}


@pytest.fixture
async def servers() -> AsyncIterator[tuple[ScriptedServer, ScriptedServer]]:
    async with ScriptedServer() as b, ScriptedServer() as c:
        yield b, c


async def _size(b: ScriptedServer, c: ScriptedServer) -> ImpossibleSize:
    async with OpenAIEndpoint("baseline", b.url) as be, OpenAIEndpoint("candidate", c.url) as ce:
        return await size(EndpointPair(be, ce, model="m"), CFG, "startup")


async def test_the_prompt_exceeds_the_larger_context_counted_by_the_servers_tokenizer(
    servers: tuple[ScriptedServer, ScriptedServer],
) -> None:
    b, c = servers
    b.route("/v1/models", reply_json(listing(max_model_len=2048)))
    c.route("/v1/models", reply_json(listing(max_model_len=32768)))  # the upgrade's longer one
    b.route("/tokenize", reply_json({"count": 128, "tokens": list(range(128))}))  # 2 per word
    sized = await _size(b, c)
    assert sized.context_tokens == {"baseline": 2048, "candidate": 32768}
    assert sized.tokens_per_word == 2.0
    assert sized.words == int(32768 * OVERSHOOT / 2)
    assert sized.tokens_source == "counted by /tokenize"


async def test_without_a_tokenizer_the_prompt_tokens_of_a_completion_count(
    servers: tuple[ScriptedServer, ScriptedServer],
) -> None:
    b, c = servers
    b.route("/v1/models", reply_json(listing(context_length=1000)))
    usage = {"prompt_tokens": 64, "completion_tokens": 1, "total_tokens": 65}
    body = {"choices": [{"index": 0, "text": "x", "finish_reason": "length"}], "usage": usage}
    b.route("/v1/completions", reply_json(body))
    sized = await _size(b, c)
    assert (sized.words, sized.tokens_source) == (1250, "counted by usage.prompt_tokens")
    assert sized.context_source["candidate"] == "no context length in /v1/models or /props"


async def test_an_undiscoverable_context_says_so_and_sends_the_configured_length(
    servers: tuple[ScriptedServer, ScriptedServer],
) -> None:
    b, c = servers  # llama-cpp-python: /v1/models names no context, and there is no /props
    b.route("/v1/models", reply_json(listing(owned_by="me")))
    sized = await _size(b, c)
    assert sized.words == 12_000
    assert sized.target_tokens is None
    assert "the context could not be discovered" in sized.describe()


@pytest.mark.parametrize(
    ("message", "tokens"),
    [
        ("Requested tokens (12001) exceed context window of 4096", 4096),
        ("This model's maximum context length is 8192 tokens. However, you requested", 8192),
        ("the request exceeds the available context size (2048 tokens)", 2048),
        ("bad request", None),
    ],
    ids=["llama-cpp-python", "vllm", "llama-server", "none"],
)
def test_a_rejection_names_the_context(message: str, tokens: int | None) -> None:
    assert context_in_error(message) == tokens
