"""The seed probe against scripted servers: a repeat proves a seed only if another seed differs."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from servegate.endpoints.http import OpenAIEndpoint
from servegate.endpoints.scripted import (
    Conn,
    Request,
    Script,
    ScriptedServer,
    chat_body,
    reply_json,
)
from servegate.gates.capabilities import PROBERS

COMPLETION = {"object": "text_completion", "model": "m",
              "choices": [{"index": 0, "text": "-", "finish_reason": "length"}]}  # fmt: skip


def _answering(text_for: Callable[[dict[str, Any]], str]) -> Script:
    async def script(request: Request, conn: Conn) -> None:
        await reply_json(chat_body(text_for(request.json())))(request, conn)

    return script


_counter = itertools.count()


@pytest.fixture
async def server() -> AsyncIterator[ScriptedServer]:
    async with ScriptedServer() as srv:
        srv.route("/v1/completions", reply_json(COMPLETION))
        yield srv


@pytest.mark.parametrize(
    ("text_for", "supported", "said"),
    [
        (lambda body: f"word{body['seed']}", True, "another seed, another sample"),
        (lambda body: f"word{next(_counter)}", False, "same seed gave different samples"),
        (lambda body: "word", None, "the server does not sample"),
    ],
    ids=["honours-seed", "ignores-seed", "does-not-sample"],
)
async def test_the_seed_probe_tells_a_seed_from_a_server_that_never_samples(
    server: ScriptedServer,
    text_for: Callable[[dict[str, Any]], str],
    supported: bool | None,
    said: str,
) -> None:
    server.route("/v1/chat/completions", _answering(text_for))
    async with OpenAIEndpoint("candidate", server.url) as ep:
        seen = await PROBERS["seed"](ep, dict, 5.0)
    assert (seen.supported, said in seen.detail) == (supported, True), seen
    seeds = [r.json()["seed"] for r in server.requests if r.path == "/v1/chat/completions"]
    assert seeds == ([1234, 1234] if supported is False else [1234, 1234, 4321])
