"""The fault proxy before a scripted fake engine: what each fault changes and what it leaves."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from servegate.engine.fault_proxy import rewrite_event, split_events
from servegate.engine.faults import FAULTS, FaultOptions, options_argv, proxy_app

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}]
ARGUMENT_FRAGMENTS = ["{", ' "', "city", '":', ' "', "Paris", '"', " }"]
CONTENT_PIECES = ["{", ' "city', '": ', '"Paris', '" }']


def _chunk(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}]}


@dataclass
class FakeEngine:
    """Answers chats like llama-cpp-python does, and records every request body it gets."""

    url: str = ""
    bodies: list[dict[str, Any]] = field(default_factory=list)

    def answer(self, body: dict[str, Any]) -> dict[str, Any]:
        if body.get("tools"):
            call = {
                "id": "c1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": "".join(ARGUMENT_FRAGMENTS)},
            }
            message: dict[str, Any] = {"role": "assistant", "content": None, "tool_calls": [call]}
        else:
            message = {"role": "assistant", "content": "".join(CONTENT_PIECES)}
        return {"object": "chat.completion", "choices": [
            {"index": 0, "message": message, "finish_reason": "stop"}]}  # fmt: skip

    def events(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        chunks = [_chunk({"role": "assistant", "content": None})]
        if body.get("tools"):
            chunks += [
                _chunk({"tool_calls": [{"index": 0, "function": {"arguments": fragment}}]})
                for fragment in ARGUMENT_FRAGMENTS
            ]
        else:
            chunks += [_chunk({"content": piece}) for piece in CONTENT_PIECES]
        return [*chunks, _chunk({}, "stop")]


@pytest.fixture
async def engine() -> AsyncIterator[FakeEngine]:
    state = FakeEngine()

    async def models(request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "fake"}]})

    async def chat(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        state.bodies.append(body)
        if not body.get("stream"):
            return web.json_response(state.answer(body))
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for event in state.events(body):
            await response.write(b"data: " + json.dumps(event).encode() + b"\n\n")
        await response.write(b"data: [DONE]\n\n")
        return response

    app = web.Application()
    app.router.add_get("/v1/models", models)
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_post("/v1/completions", chat)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    state.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    yield state
    await runner.cleanup()


Proxy = Callable[..., Awaitable[str]]


@pytest.fixture
async def proxy(engine: FakeEngine) -> AsyncIterator[Proxy]:
    runners: list[web.AppRunner] = []

    async def start(name: str, **options: Any) -> str:
        fault = FAULTS[name].build(FaultOptions(**options))
        runner = web.AppRunner(proxy_app(fault, engine.url), handler_cancellation=True)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        runners.append(runner)
        return f"http://127.0.0.1:{runner.addresses[0][1]}"

    yield start
    for runner in runners:
        await runner.cleanup()


async def _post(url: str, body: dict[str, Any]) -> tuple[bytes, dict[str, str]]:
    async with (
        aiohttp.ClientSession() as client,
        client.post(f"{url}/v1/chat/completions", json=body) as answer,
    ):
        assert answer.status == 200
        return await answer.read(), dict(answer.headers)


def _chat(**extra: Any) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": "Paris as JSON?"}], **extra}


def _joined(raw: bytes) -> tuple[str, str]:
    """Content and tool-call arguments joined from an SSE body."""
    content = arguments = ""
    for event in raw.split(b"\n\n"):
        if event.startswith(b"data: {"):
            delta = json.loads(event[6:])["choices"][0]["delta"]
            content += delta.get("content") or ""
            arguments += "".join(c["function"]["arguments"] for c in delta.get("tool_calls") or [])
    return content, arguments


@pytest.mark.parametrize("name", list(FAULTS))
async def test_model_listing_passes_every_fault_byte_for_byte(name: str, proxy: Proxy) -> None:
    url = await proxy(name, delay_ms=1)
    async with aiohttp.ClientSession() as client, client.get(f"{url}/v1/models") as answer:
        assert await answer.read() == b'{"object": "list", "data": [{"id": "fake"}]}'


@pytest.mark.parametrize("name", ["stream-tool-args", "json-truncated", "slow"])
async def test_a_plain_streamed_chat_passes_faults_aimed_elsewhere_byte_for_byte(
    name: str, proxy: Proxy, engine: FakeEngine
) -> None:
    url = await proxy(name, delay_ms=1)
    raw, _ = await _post(url, _chat(stream=True, max_tokens=4))
    direct, _ = await _post(engine.url, _chat(stream=True, max_tokens=4))
    assert raw == direct


async def test_stream_tool_args_breaks_streamed_arguments_but_not_the_non_streamed_call(
    proxy: Proxy,
) -> None:
    url = await proxy("stream-tool-args")
    raw, _ = await _post(url, _chat(tools=TOOLS, tool_choice="auto"))
    call = json.loads(raw)["choices"][0]["message"]["tool_calls"][0]
    assert call["function"]["arguments"] == '{ "city": "Paris" }'
    streamed, _ = await _post(url, _chat(tools=TOOLS, stream=True))
    assert _joined(streamed) == ("", '{city": "Paris" }')
    assert streamed.endswith(b"data: [DONE]\n\n")


async def test_reasoning_leak_prefixes_json_and_streamed_content(proxy: Proxy) -> None:
    url = await proxy("reasoning-leak", reasoning_text="<think>hmm</think>\n")
    raw, headers = await _post(url, _chat())
    assert int(headers["Content-Length"]) == len(raw)
    content = json.loads(raw)["choices"][0]["message"]["content"]
    assert content == '<think>hmm</think>\n{ "city": "Paris" }'
    streamed, _ = await _post(url, _chat(stream=True))
    assert _joined(streamed)[0] == content


async def test_template_drift_sends_the_engine_another_system_prompt(
    proxy: Proxy, engine: FakeEngine
) -> None:
    url = await proxy("template-drift", system_text="You are SmolLM.")
    await _post(url, _chat(max_tokens=3))
    assert engine.bodies == [
        {"messages": [{"role": "system", "content": "You are SmolLM."},
                      {"role": "user", "content": "Paris as JSON?"}], "max_tokens": 3}
    ]  # fmt: skip


async def test_json_truncated_cuts_json_mode_answers_only(proxy: Proxy) -> None:
    url = await proxy("json-truncated")
    raw, _ = await _post(url, _chat())
    assert json.loads(raw)["choices"][0]["message"]["content"] == '{ "city": "Paris" }'
    json_mode = _chat(response_format={"type": "json_object"})
    raw, _ = await _post(url, json_mode)
    answer = json.loads(raw)["choices"][0]
    assert answer["message"]["content"] == '{ "city": "Pa'
    assert answer["finish_reason"] == "stop"
    streamed, _ = await _post(url, {**json_mode, "stream": True})
    assert _joined(streamed)[0] == '{ "city": "Pa'


async def test_eos_ignored_asks_the_engine_for_max_tokens_without_eos(
    proxy: Proxy, engine: FakeEngine
) -> None:
    url = await proxy("eos-ignored", runaway_max_tokens=32)
    await _post(url, _chat(max_tokens=5))
    await _post(url, _chat())
    await _post(url, _chat(tools=TOOLS))
    assert [(b.get("max_tokens"), b.get("min_tokens")) for b in engine.bodies] == [
        (5, 5), (32, 32), (None, None),
    ]  # fmt: skip


async def test_slow_delays_the_request_and_every_streamed_event(proxy: Proxy) -> None:
    url = await proxy("slow", delay_ms=50)
    began = time.perf_counter()
    await _post(url, _chat())
    assert time.perf_counter() - began >= 0.05
    began = time.perf_counter()
    streamed, _ = await _post(url, _chat(stream=True))
    events = streamed.count(b"\n\n")  # role, 5 pieces, finish, [DONE]
    assert events == 8
    assert time.perf_counter() - began >= 0.05 * events


@pytest.mark.parametrize(
    ("chunks", "events", "rest"),
    [
        ([b"data: 1\n\nda", b"ta: 2\n\n"], [b"data: 1\n\n", b"data: 2\n\n"], b""),
        ([b"data: 1\r\n", b"\r\ndata: 2"], [b"data: 1\r\n\r\n"], b"data: 2"),
        ([b": keep-alive\n\ndata: [DONE]\n\n"], [b": keep-alive\n\n", b"data: [DONE]\n\n"], b""),
    ],
    ids=["split-mid-event", "crlf-across-chunks", "comment"],
)
def test_sse_events_are_split_on_blank_lines_across_chunks(
    chunks: list[bytes], events: list[bytes], rest: bytes
) -> None:
    found: list[bytes] = []
    buffer = b""
    for chunk in chunks:
        complete, buffer = split_events(buffer + chunk)
        found += complete
    assert (found, buffer) == (events, rest)


def test_a_rewritten_event_keeps_its_line_endings_and_other_fields() -> None:
    event = b'event: chunk\r\ndata: {"n": 1}\r\n\r\n'
    out = rewrite_event(event, lambda payload: [{"n": 2}, {"n": 3}])
    assert out == [b'event: chunk\ndata: {"n": 2}\r\n\r\n', b'event: chunk\ndata: {"n": 3}\r\n\r\n']
    assert rewrite_event(b"data: [DONE]\n\n", lambda payload: []) == [b"data: [DONE]\n\n"]


def test_fault_options_travel_to_the_proxy_process_as_flags() -> None:
    argv = options_argv(FaultOptions(delay_ms=5, reasoning_text="<think>\n"))
    assert argv[argv.index("--delay-ms") + 1] == "5"
    assert argv[argv.index("--reasoning-text") + 1] == "<think>\n"
    assert argv[argv.index("--truncate-fraction") + 1] == "0.3"


@pytest.mark.parametrize(
    "options",
    [{"drop_fragment": 0}, {"truncate_fraction": 0.0}, {"delay_ms": -1}, {"runaway_max_tokens": 0}],
    ids=["drop-fragment", "truncate-fraction", "delay", "runaway-max-tokens"],
)
def test_fault_options_refuse_values_that_mean_nothing(options: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="must"):
        FaultOptions(**options)


@pytest.mark.parametrize(
    ("name", "sent", "engine_sees"),
    [
        ("temperature-default", {"temperature": 1.0}, {"temperature": 0.7}),
        ("sampled-greedy", {"temperature": 1.5}, {"temperature": 0.0}),
        ("sampler-defaults", {"temperature": 1.0, "top_p": 0.5, "top_k": 2, "min_p": 0.1},
         {"temperature": 1.0}),
        ("nucleus-narrowed", {"temperature": 1.0, "top_p": 0.5}, {"temperature": 1.0,
                                                                  "top_p": 0.25}),
        ("seed-dropped", {"temperature": 1.0, "seed": 7}, {"temperature": 1.0}),
        ("logit-bias-dropped", {"temperature": 1.0, "logit_bias": {"504": -100}},
         {"temperature": 1.0}),
        ("penalties-stripped", {"temperature": 1.0, "presence_penalty": 1.5,
                                "repeat_penalty": 1.3}, {"temperature": 1.0,
                                "presence_penalty": 0.0, "repeat_penalty": 1.0}),
    ],
)  # fmt: skip
async def test_a_sampling_fault_rewrites_what_the_engine_is_sent_and_never_a_greedy_request(
    name: str, sent: dict[str, Any], engine_sees: dict[str, Any], proxy: Proxy, engine: FakeEngine
) -> None:
    url = await proxy(name)
    await _post(url, _chat(max_tokens=1, **sent))
    assert engine.bodies[-1] == _chat(max_tokens=1, **engine_sees)
    greedy = _chat(max_tokens=1, temperature=0, top_p=0.5, seed=7, presence_penalty=1.0)
    await _post(url, greedy)
    assert engine.bodies[-1] == greedy
