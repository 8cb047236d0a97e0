"""The fault proxy against a fake upstream on loopback: what passes, what hangs, what streams."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import aiohttp
import pytest
from aiohttp import web

from servegate.engine.faults import FAULTS, FaultOptions, prompt_chars, proxy_app


@pytest.mark.parametrize(
    ("payload", "chars"),
    [
        ({"messages": [{"role": "user", "content": "hello"}]}, 5),
        ({"messages": [{"role": "system", "content": "ab"}, {"role": "user", "content": "cd"}]}, 4),
        ({"messages": [{"role": "user", "content": [{"type": "text", "text": "abc"}]}]}, 3),
        ({"prompt": "hello"}, 5),
        ({"prompt": ["ab", "cde"]}, 5),
        ({"prompt": [1, 2, 3]}, 12),
        ({"model": "m"}, 0),
        ([1, 2], 0),
    ],
    ids=["chat", "chat-two-messages", "chat-parts", "completion", "completion-list",
         "token-ids", "no-prompt", "not-an-object"],
)  # fmt: skip
def test_prompt_size_counts_text_in_chat_and_completion_requests(
    payload: object, chars: int
) -> None:
    assert prompt_chars(payload) == chars


@dataclass
class Upstream:
    """A fake engine: records paths, streams two SSE events with a gate between them."""

    url: str = ""
    paths: list[str] = field(default_factory=list)
    release_second_event: asyncio.Event = field(default_factory=asyncio.Event)


@pytest.fixture
async def upstream() -> AsyncIterator[Upstream]:
    state = Upstream()

    async def models(request: web.Request) -> web.Response:
        state.paths.append(request.path)
        return web.json_response({"object": "list", "data": [{"id": "fake"}]})

    async def chat(request: web.Request) -> web.StreamResponse:
        state.paths.append(request.path)
        body = await request.json()
        if not body.get("stream"):
            return web.json_response({"echo": body}, headers={"X-Upstream": "yes"})
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(b'data: {"n": 1}\n\n')
        await state.release_second_event.wait()
        await response.write(b'data: {"n": 2}\n\ndata: [DONE]\n\n')
        return response

    app = web.Application()
    app.router.add_get("/v1/models", models)
    app.router.add_post("/v1/chat/completions", chat)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    state.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    yield state
    state.release_second_event.set()
    await runner.cleanup()


@pytest.fixture
async def hang_long_proxy(upstream: Upstream) -> AsyncIterator[str]:
    fault = FAULTS["hang-long"].build(FaultOptions(threshold_chars=100))
    runner = web.AppRunner(proxy_app(fault, upstream.url), handler_cancellation=True)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    await runner.cleanup()


def _chat(content: str, **extra: object) -> dict[str, object]:
    return {"messages": [{"role": "user", "content": content}], **extra}


async def test_short_prompts_and_model_listing_pass_through_unchanged(
    hang_long_proxy: str, upstream: Upstream
) -> None:
    async with aiohttp.ClientSession() as client:
        async with client.get(f"{hang_long_proxy}/v1/models") as answer:
            assert (await answer.json())["data"] == [{"id": "fake"}]
        async with client.post(
            f"{hang_long_proxy}/v1/chat/completions", json=_chat("hi")
        ) as answer:
            assert answer.status == 200
            assert answer.headers["X-Upstream"] == "yes"
            assert (await answer.json()) == {"echo": _chat("hi")}
    assert upstream.paths == ["/v1/models", "/v1/chat/completions"]


async def test_a_long_prompt_gets_no_headers_and_never_reaches_the_engine(
    hang_long_proxy: str, upstream: Upstream
) -> None:
    timeout = aiohttp.ClientTimeout(total=0.5)
    async with aiohttp.ClientSession(timeout=timeout) as client:
        with pytest.raises(asyncio.TimeoutError):
            await client.post(f"{hang_long_proxy}/v1/chat/completions", json=_chat("x" * 101))
        # The proxy is still healthy for everyone else after the client gave up.
        async with client.get(f"{hang_long_proxy}/v1/models") as answer:
            assert answer.status == 200
    assert upstream.paths == ["/v1/models"]


async def test_streams_are_relayed_event_by_event_not_buffered(
    hang_long_proxy: str, upstream: Upstream
) -> None:
    async with aiohttp.ClientSession() as client:
        url = f"{hang_long_proxy}/v1/chat/completions"
        async with client.post(url, json=_chat("hi", stream=True)) as answer:
            assert answer.headers["Content-Type"].startswith("text/event-stream")
            # The upstream holds event 2 back until event 1 has reached the client.
            first = await asyncio.wait_for(answer.content.readuntil(b"\n\n"), timeout=5)
            assert first == b'data: {"n": 1}\n\n'
            upstream.release_second_event.set()
            rest = await asyncio.wait_for(answer.content.read(), timeout=5)
    assert rest == b'data: {"n": 2}\n\ndata: [DONE]\n\n'


def test_every_registered_fault_has_a_description_and_builds() -> None:
    for name, spec in FAULTS.items():
        assert spec.description, name
        assert callable(spec.build(FaultOptions()))


@pytest.fixture
async def batch_corrupt_proxy() -> AsyncIterator[tuple[str, asyncio.Event]]:
    """batch-corrupt in front of a fake engine that answers "Hello world" and holds any request
    marked `hold` until the event is set."""
    release = asyncio.Event()

    async def chat(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        if body.get("hold"):
            await release.wait()
        if not body.get("stream"):
            message = {"role": "assistant", "content": "Hello world"}
            return web.json_response({"choices": [{"index": 0, "message": message}]})
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for piece in ("Hello", " world"):
            event = {"choices": [{"index": 0, "delta": {"content": piece}}]}
            await response.write(f"data: {json.dumps(event)}\n\n".encode())
        await response.write(b"data: [DONE]\n\n")
        return response

    engine = web.Application()
    engine.router.add_post("/v1/chat/completions", chat)
    engine_runner = web.AppRunner(engine)
    await engine_runner.setup()
    await web.TCPSite(engine_runner, "127.0.0.1", 0).start()
    upstream = f"http://127.0.0.1:{engine_runner.addresses[0][1]}"
    fault = FAULTS["batch-corrupt"].build(FaultOptions())
    runner = web.AppRunner(proxy_app(fault, upstream))
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    yield f"http://127.0.0.1:{runner.addresses[0][1]}/v1/chat/completions", release
    release.set()
    await runner.cleanup()
    await engine_runner.cleanup()


async def _content(client: aiohttp.ClientSession, url: str, **extra: object) -> str:
    async with client.post(url, json=_chat("hi", **extra)) as answer:
        if not extra.get("stream"):
            return str((await answer.json())["choices"][0]["message"]["content"])
        text = (await answer.read()).decode()
    events = [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: {")]
    return "".join(e["choices"][0]["delta"]["content"] for e in events)


async def test_batch_corrupt_mirrors_answers_only_while_another_request_is_in_flight(
    batch_corrupt_proxy: tuple[str, asyncio.Event],
) -> None:
    url, release = batch_corrupt_proxy
    async with aiohttp.ClientSession() as client:
        assert await _content(client, url) == "Hello world"
        assert await _content(client, url, stream=True) == "Hello world"
        held = asyncio.create_task(_content(client, url, hold=True))
        await asyncio.sleep(0.2)  # the held request is now in flight at the proxy
        assert await _content(client, url) == "olleH dlrow"
        assert await _content(client, url, stream=True) == "olleH dlrow"
        release.set()
        # Answered once it was alone again: untouched.
        assert await held == "Hello world"
        assert await _content(client, url) == "Hello world"
