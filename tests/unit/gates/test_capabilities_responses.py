"""The Responses API capability against scripted servers: vLLM 0.32.0's real answer, a server
without the route, and one that answers something that is not a response object."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from servegate.endpoints.http import OpenAIEndpoint
from servegate.endpoints.responses import respond
from servegate.endpoints.scripted import ScriptedServer, reply_bytes, reply_json, reply_status
from servegate.gates.capabilities import PROBERS

DATA = Path(__file__).resolve().parents[2] / "data" / "vllm"
REAL = json.loads((DATA / "responses.json").read_text())["response"]


@pytest.mark.parametrize(
    ("route", "supported", "said"),
    [
        (reply_json(REAL), True, "status incomplete, \"L'Étoile"),
        (reply_status(404, b'{"detail":"Not Found"}'), False, "rejected"),
        (reply_json({"object": "chat.completion", "choices": []}), False, "schema"),
    ],
    ids=["vllm-0.32", "no-route", "not-a-response"],
)
async def test_the_responses_probe_needs_a_real_response_object(
    route: Any, supported: bool, said: str
) -> None:
    async with ScriptedServer() as server:
        server.route("/v1/responses", route)
        async with OpenAIEndpoint("candidate", server.url) as ep:
            seen = await PROBERS["responses"](ep, dict, 5.0)
    assert (seen.supported, said in seen.detail) == (supported, True), seen.detail


async def test_a_streamed_response_is_read_through_the_same_endpoint() -> None:
    stream = (DATA / "responses-stream.sse").read_bytes()
    async with ScriptedServer() as server:
        server.route("/v1/responses", reply_bytes(stream, content_type="text/event-stream"))
        async with OpenAIEndpoint("candidate", server.url) as ep:
            answer = await respond(ep, {"input": "x", "stream": True}, deadline_s=5.0)
    assert answer.completion.ok
    assert answer.events[-1] == "response.completed"
    assert answer.completion.text == "L'Étoile, la Marseillaise, la femme,"
