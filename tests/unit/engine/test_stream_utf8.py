"""stream-utf8: streamed text decoded chunk by chunk with every multi-byte character split, as a
server that decodes each chunk alone does; plain answers untouched."""

from __future__ import annotations

import copy
import json
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web

from servegate.engine.fault_proxy import Payload, rewrite_stream_bytes
from servegate.engine.fault_rewrites import split_utf8_event, split_utf8_text
from servegate.engine.faults import FAULTS, FaultOptions, proxy_app

REPLACEMENT = "\ufffd"


def _decoded_chunk_by_chunk(text: str) -> str:
    """What the buggy server sends: each character's UTF-8 bytes cut after the lead byte, and
    every chunk decoded on its own with errors="replace" (Python's, and WHATWG's, decoder)."""
    out = ""
    for ch in text:
        raw = ch.encode("utf-8")
        out += raw[:1].decode("utf-8", "replace") + raw[1:].decode("utf-8", "replace")
    return out


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("25 °C", "25 " + REPLACEMENT * 2 + "C"),
        ("café", "caf" + REPLACEMENT * 2),
        ("天空", REPLACEMENT * 6),
        ("€5", REPLACEMENT * 3 + "5"),
        ("ok 😀", "ok " + REPLACEMENT * 4),
        ("plain ASCII, kept\n", "plain ASCII, kept\n"),
        ("", ""),
    ],
    ids=["degree-2-bytes", "accent-2-bytes", "cjk-3-bytes", "euro-3-bytes", "emoji-4-bytes",
         "ascii", "empty"],
)  # fmt: skip
def test_each_non_ascii_character_becomes_one_replacement_per_utf8_byte(
    text: str, expected: str
) -> None:
    assert split_utf8_text(text) == expected


@pytest.mark.parametrize("text", ["25 °C", "Réponds en français", "空氣是什么颜色？\n", "ok 😀 ü"])
def test_the_rewrite_is_what_a_decoder_fed_split_characters_produces(text: str) -> None:
    assert split_utf8_text(text) == _decoded_chunk_by_chunk(text)


def _chat_chunk(delta: dict[str, object]) -> Payload:
    return {
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": delta, "finish_reason": None}],
    }


def test_a_chat_delta_with_non_ascii_content_is_replaced_and_the_rest_kept() -> None:
    chunk = _chat_chunk({"role": "assistant", "content": "Il fait 25 °C"})
    chunk["choices"][0]["logprobs"] = {"content": [{"token": "°", "logprob": -0.1}]}
    original = copy.deepcopy(chunk)
    [rewritten] = split_utf8_event(chunk) or []
    assert rewritten["choices"][0]["delta"] == {
        "role": "assistant",
        "content": "Il fait 25 " + REPLACEMENT * 2 + "C",
    }
    assert rewritten["choices"][0]["logprobs"] == original["choices"][0]["logprobs"]
    assert rewritten["object"] == "chat.completion.chunk"
    assert chunk == original  # input not mutated


def test_a_text_completion_chunk_is_replaced() -> None:
    chunk = {"object": "text_completion", "choices": [{"index": 0, "text": "naïve"}]}
    [rewritten] = split_utf8_event(chunk) or []
    assert rewritten["choices"][0]["text"] == "na" + REPLACEMENT * 2 + "ve"


@pytest.mark.parametrize(
    "payload",
    [
        _chat_chunk({"role": "assistant", "content": ""}),
        _chat_chunk({"content": "plain ASCII"}),
        _chat_chunk({}),
        _chat_chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"c": "°"}'}}]}),
        {"object": "chat.completion.chunk", "choices": [], "usage": {"total_tokens": 3}},
        {"error": {"message": "überlastet"}},
    ],
    ids=["role-only", "ascii-content", "empty-delta", "tool-arguments", "usage-only", "error"],
)
def test_events_without_non_ascii_content_or_text_pass_unchanged(payload: Payload) -> None:
    assert split_utf8_event(payload) is None


def test_a_whole_stream_keeps_ascii_events_byte_for_byte() -> None:
    events = [_chat_chunk({"content": "Hello "}), _chat_chunk({"content": "wörld"})]
    raw = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events)
    raw += b"data: [DONE]\n\n"
    out = rewrite_stream_bytes(raw, split_utf8_event)
    first, second, done, _ = out.split(b"\n\n")
    assert first == raw.split(b"\n\n")[0]
    assert json.loads(second[6:])["choices"][0]["delta"]["content"] == "w" + REPLACEMENT * 2 + "rld"
    assert done == b"data: [DONE]"


@pytest.fixture
async def stream_utf8_url() -> AsyncIterator[str]:
    """stream-utf8 in front of a fake engine answering "Il fait 25 °C" as a chat (plain or in
    two streamed pieces) and as a text completion."""
    text, pieces = "Il fait 25 °C", ("Il fait 25 ", "°C")

    async def answer(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        chat = request.path.endswith("/chat/completions")
        if not body.get("stream"):
            choice = {"message": {"role": "assistant", "content": text}} if chat else {"text": text}
            return web.json_response({"choices": [{"index": 0, **choice}]})
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for piece in pieces:
            choice = {"delta": {"content": piece}} if chat else {"text": piece}
            event = {"choices": [{"index": 0, **choice}]}
            await response.write(f"data: {json.dumps(event)}\n\n".encode())
        await response.write(b"data: [DONE]\n\n")
        return response

    engine = web.Application()
    engine.router.add_post("/v1/chat/completions", answer)
    engine.router.add_post("/v1/completions", answer)
    engine_runner = web.AppRunner(engine)
    await engine_runner.setup()
    await web.TCPSite(engine_runner, "127.0.0.1", 0).start()
    upstream = f"http://127.0.0.1:{engine_runner.addresses[0][1]}"
    runner = web.AppRunner(proxy_app(FAULTS["stream-utf8"].build(FaultOptions()), upstream))
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    yield f"http://127.0.0.1:{runner.addresses[0][1]}/v1"
    await runner.cleanup()
    await engine_runner.cleanup()


async def _text(client: aiohttp.ClientSession, url: str, stream: bool) -> str:
    chat = url.endswith("/chat/completions")
    body: dict[str, object] = {"max_tokens": 8, "stream": stream}
    body.update({"messages": [{"role": "user", "content": "hi"}]} if chat else {"prompt": "hi"})
    async with client.post(url, json=body) as answer:
        if not stream:
            choice = (await answer.json())["choices"][0]
            return str(choice["message"]["content"] if chat else choice["text"])
        raw = (await answer.read()).decode()
    events = [json.loads(line[6:]) for line in raw.splitlines() if line.startswith("data: {")]
    return "".join(
        e["choices"][0]["delta"]["content"] if chat else e["choices"][0]["text"] for e in events
    )


@pytest.mark.parametrize("route", ["/chat/completions", "/completions"], ids=["chat", "text"])
async def test_only_streamed_answers_lose_their_non_ascii_characters(
    stream_utf8_url: str, route: str
) -> None:
    url = stream_utf8_url + route
    async with aiohttp.ClientSession() as client:
        assert await _text(client, url, stream=False) == "Il fait 25 °C"
        assert await _text(client, url, stream=True) == "Il fait 25 " + REPLACEMENT * 2 + "C"
