"""`servegate proxy` in front of the real reference engine, driven by the real `openai` SDK.

One proxy for the module: primary = the clean engine, candidate = the clean model behind the
hang-long fault (short prompts answered, long ones never), every mirrorable request sampled,
one mirror worker, a queue of 2 and a 20 s candidate timeout (a short answer took up to
10 s on a 2-core machine at load average 11), so a few long prompts fill the
mirror and drop. Whatever the candidate does, the user's answer must be the engine's answer.
"""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import openai
import pytest

from servegate.engine import RunningEngine
from servegate.engine.process import free_port

from .conftest import HANG_THRESHOLD_CHARS
from .proxy_harness import (
    RunningProxy,
    metric,
    normalised,
    normalised_body,
    serve_in_thread,
    start_proxy,
)

pytestmark = [pytest.mark.engine]

USER_KEY = "sk-user-proxy-canary-4b1d9e7c2a"
BODY_SECRET = "sk-body-proxy-canary-93af01c6d2"
BEARER_IN_BODY = "Bearer eyJhbGciOi.proxycanary0123456789"
COOKIE = "session=cookie-proxy-canary-77e1"
MAX_BODY = 64 * 1024
CHAT = {
    "messages": [{"role": "user", "content": "What is 2+2?"}],
    "temperature": 0,
    "max_tokens": 16,
}
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get weather for a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"type": "string"}},
            "required": ["city"],
        },
    },
}
TOOL_CHOICE = {"type": "function", "function": {"name": "get_weather"}}
LONG_PROMPT = "Summarise this in one word. " + "The river runs past the old mill. " * 40
assert len(LONG_PROMPT) > HANG_THRESHOLD_CHARS


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the module's proxy writes its database and capture file."""
    return tmp_path_factory.mktemp("proxy")


@pytest.fixture(scope="module")
def proxy(
    clean_engine: RunningEngine, hang_long_engine: RunningEngine, folder: Path
) -> Iterator[RunningProxy]:
    with start_proxy(
        "--primary", clean_engine.base_url, "--candidate", hang_long_engine.base_url,
        "--sample", "1", "--mirror-workers", "1", "--queue-size", "2",
        "--candidate-timeout-s", "20", "--max-body-bytes", str(MAX_BODY),
        "--db", str(folder / "proxy.db"), "--capture", str(folder / "capture.jsonl"),
        "--store-bodies", "redacted",
    ) as running:  # fmt: skip
        yield running


def _client(base_url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=base_url, api_key=USER_KEY, max_retries=0, timeout=60)


def _post(url: str, data: bytes, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    headers = headers or {"Content-Type": "application/json"}
    request = urllib.request.Request(url, data=data, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def _answer(message: Any) -> dict[str, Any]:
    return normalised(message.model_dump())


def test_a_chat_through_the_proxy_is_the_engines_chat(
    proxy: RunningProxy, clean_engine: RunningEngine
) -> None:
    direct = _client(clean_engine.base_url).chat.completions.create(model="m", **CHAT)
    proxied = _client(proxy.base_url).chat.completions.create(model="m", **CHAT)
    assert proxied.choices[0].message.content == direct.choices[0].message.content
    assert proxied.choices[0].finish_reason == direct.choices[0].finish_reason
    assert proxied.usage == direct.usage
    assert _answer(proxied) == _answer(direct)


def _streamed(client: openai.OpenAI, **body: Any) -> tuple[str, str | None, Any, list[Any]]:
    text, finish, usage, chunks = "", None, None, []
    for chunk in client.chat.completions.create(
        model="m", stream=True, stream_options={"include_usage": True}, **body
    ):
        chunks.append(normalised(chunk.model_dump()))
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            text += choice.delta.content or ""
            finish = choice.finish_reason or finish
    return text, finish, usage, chunks


def test_a_streamed_chat_through_the_proxy_is_the_engines_stream(
    proxy: RunningProxy, clean_engine: RunningEngine
) -> None:
    direct = _streamed(_client(clean_engine.base_url), **CHAT)
    proxied = _streamed(_client(proxy.base_url), **CHAT)
    assert direct[0], "the engine answered nothing: the comparison would be empty"
    assert proxied == direct  # same text, finish reason, usage and every chunk


def test_a_tool_call_through_the_proxy_is_the_engines_tool_call(
    proxy: RunningProxy, clean_engine: RunningEngine
) -> None:
    body = {**CHAT, "messages": [{"role": "user", "content": "What is the weather in Paris?"}],
            "tools": [WEATHER_TOOL], "tool_choice": TOOL_CHOICE, "max_tokens": 32}  # fmt: skip
    direct = _client(clean_engine.base_url).chat.completions.create(model="m", **body)
    proxied = _client(proxy.base_url).chat.completions.create(model="m", **body)
    calls = proxied.choices[0].message.tool_calls
    assert calls
    assert calls[0].function.name == "get_weather"
    assert _answer(proxied) == _answer(direct)
    streamed_direct = _streamed(_client(clean_engine.base_url), **body)
    streamed_proxied = _streamed(_client(proxy.base_url), **body)
    assert streamed_proxied == streamed_direct


def test_a_bad_request_gets_the_engines_own_error(
    proxy: RunningProxy, clean_engine: RunningEngine
) -> None:
    errors = []
    for base_url in (clean_engine.base_url, proxy.base_url):
        with pytest.raises(openai.APIStatusError) as caught:
            _client(base_url).chat.completions.create(
                model="m", messages=[{"role": "nobody", "content": "hi"}], max_tokens=4
            )
        errors.append((type(caught.value), caught.value.status_code, caught.value.body))
    assert errors[0][1] >= 400
    assert errors[1] == errors[0]


def test_a_body_that_is_not_json_gets_the_engines_answer_and_is_not_mirrored(
    proxy: RunningProxy, clean_engine: RunningEngine
) -> None:
    before = proxy.wait_idle()
    headers = {"Content-Type": "application/json"}
    direct = _post(clean_engine.base_url + "/chat/completions", b"{not json", headers)
    proxied = _post(proxy.base_url + "/chat/completions", b"{not json", headers)
    assert direct[0] >= 400
    assert (proxied[0], normalised_body(proxied[1])) == (direct[0], normalised_body(direct[1]))
    after = proxy.wait_idle()
    assert after["mirror_pairs"] + after["mirror_dropped"] == (
        before["mirror_pairs"] + before["mirror_dropped"]
    )


def test_an_oversized_body_is_refused_with_413_and_the_proxy_stays_up(
    proxy: RunningProxy,
) -> None:
    big = json.dumps({**CHAT, "messages": [{"role": "user", "content": "x" * MAX_BODY}]})
    status, body = _post(proxy.base_url + "/chat/completions", big.encode())
    assert status == 413
    assert "limit of 65536 bytes" in json.loads(body)["error"]["message"]
    assert _client(proxy.base_url).chat.completions.create(model="m", **CHAT).choices


async def _disconnect_after_first_chunk(url: str) -> bytes:
    # short enough that the mirrored copy does not keep the candidate engine (which finishes a
    # generation its client left) busy for the next tests
    body = {**CHAT, "stream": True, "max_tokens": 48, "temperature": 0.8}
    async with aiohttp.ClientSession() as session:
        response = await session.post(url + "/chat/completions", json=body)
        first = await response.content.readany()
        response.close()  # the client goes away mid-stream
        return first


def test_a_client_that_disconnects_mid_stream_cancels_the_request_upstream(
    proxy: RunningProxy, clean_engine: RunningEngine
) -> None:
    first = asyncio.run(_disconnect_after_first_chunk(proxy.base_url))
    assert first.startswith(b"data: ")
    health = proxy.health()
    for _ in range(100):
        if health["in_flight"] == 0:
            break
        asyncio.run(asyncio.sleep(0.1))
        health = proxy.health()
    assert health["in_flight"] == 0
    # the engine is free again: a 200-token generation was not left running behind the user
    direct = _client(clean_engine.base_url).chat.completions.create(model="m", **CHAT)
    assert _answer(_client(proxy.base_url).chat.completions.create(model="m", **CHAT)) == (
        _answer(direct)
    )


def test_mirrored_pairs_are_compared_and_exported(proxy: RunningProxy) -> None:
    # a short greedy prompt, which the hang-long candidate answers as the clean engine does
    # (before the hung-candidate test below fills the mirror with prompts that never finish)
    proxy.wait_idle()
    text = proxy.metrics()
    greedy = metric(text, "servegate_proxy_mirror_greedy_pairs_total")
    exact = metric(text, "servegate_proxy_mirror_exact_matches_total")
    _client(proxy.base_url).chat.completions.create(model="m", **CHAT)
    proxy.wait_idle()
    text = proxy.metrics()
    assert metric(text, "servegate_proxy_mirror_greedy_pairs_total") == greedy + 1
    assert metric(text, "servegate_proxy_mirror_exact_matches_total") == exact + 1
    assert metric(text, "servegate_proxy_mirror_queue_capacity") == 2
    assert metric(text, "servegate_proxy_outputs_total", side="candidate") >= 1
    assert "servegate_proxy_e2el_seconds_bucket" in text


def test_secrets_never_reach_the_database_or_the_capture_file(
    proxy: RunningProxy, folder: Path
) -> None:
    written = proxy.wait_idle()["records_written"]
    body = {**CHAT, "messages": [{"role": "user", "content": f"my key is {BODY_SECRET} and "
                                  f"my header {BEARER_IN_BODY}"}]}  # fmt: skip
    headers = {"Authorization": f"Bearer {USER_KEY}", "Cookie": COOKIE, "x-api-key": USER_KEY,
               "Content-Type": "application/json"}  # fmt: skip
    status, _ = _post(proxy.base_url + "/chat/completions", json.dumps(body).encode(), headers)
    assert status == 200
    assert proxy.wait_idle()["records_written"] == written + 1
    files = [p for p in folder.iterdir() if p.is_file()]
    assert any(p.name == "capture.jsonl" for p in files)
    blob = b"".join(p.read_bytes() for p in files)
    assert b"my key is [REDACTED]" in blob  # the request was written, and redacted
    for secret in (USER_KEY, BODY_SECRET, "proxycanary0123456789", "cookie-proxy-canary"):
        assert secret.encode() not in blob, secret


def test_a_client_that_gives_up_on_a_hung_primary_frees_the_proxy(
    hang_long_engine: RunningEngine, clean_engine: RunningEngine, tmp_path: Path
) -> None:
    body = {"messages": [{"role": "user", "content": LONG_PROMPT}], "max_tokens": 8}
    with start_proxy("--primary", hang_long_engine.base_url, "--candidate",
                     clean_engine.base_url, "--sample", "0",
                     "--db", str(tmp_path / "p.db")) as hung:  # fmt: skip
        request = urllib.request.Request(
            hung.base_url + "/chat/completions", data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )  # fmt: skip
        with pytest.raises(TimeoutError):
            urllib.request.urlopen(request, timeout=2)
        health = hung.health()
        for _ in range(100):
            if health["in_flight"] == 0:
                break
            asyncio.run(asyncio.sleep(0.1))
            health = hung.health()
        assert health["in_flight"] == 0  # the upstream request was cancelled with the client's
        # the user gave up on the side that made them wait: it counts against that side
        exposition = hung.metrics()
        assert metric(exposition, "servegate_proxy_errors_total", side="primary") == 1
        assert metric(exposition, "servegate_proxy_timeouts_total", side="primary") == 1
        abandoned = {"side": "primary", "answer_class": "abandoned"}
        assert metric(exposition, "servegate_proxy_answers_total", **abandoned) == 1


@pytest.mark.timed
def test_a_hung_candidate_leaves_user_answers_unchanged_and_drops_are_counted(
    proxy: RunningProxy, clean_engine: RunningEngine
) -> None:
    body = {"messages": [{"role": "user", "content": LONG_PROMPT}], "temperature": 0,
            "max_tokens": 8}  # fmt: skip
    primary_errors = metric(proxy.metrics(), "servegate_proxy_errors_total", side="primary")
    direct = [
        _post(clean_engine.base_url + "/chat/completions", json.dumps(body).encode())
        for _ in range(2)
    ]
    proxied = [
        _post(proxy.base_url + "/chat/completions", json.dumps(body).encode()) for _ in range(5)
    ]
    assert direct[0][0] == 200
    assert normalised_body(direct[0][1]) == normalised_body(direct[1][1])  # the engine's own noise
    for status, data in proxied:
        assert (status, normalised_body(data)) == (200, normalised_body(direct[0][1]))
    health = proxy.health()
    assert health["mirror_dropped"] >= 1, health  # one in flight, two queued, the rest dropped
    # the hung mirror gives up after its timeout and is counted as the candidate's timeout
    deadline_s = 60
    text = proxy.metrics()
    for _ in range(deadline_s * 10):
        if metric(text, "servegate_proxy_timeouts_total", side="candidate") >= 1:
            break
        asyncio.run(asyncio.sleep(0.1))
        text = proxy.metrics()
    assert metric(text, "servegate_proxy_timeouts_total", side="candidate") >= 1
    assert metric(text, "servegate_proxy_mirror_dropped_total") == health["mirror_dropped"]
    assert metric(text, "servegate_proxy_errors_total", side="primary") == primary_errors


def test_a_primary_that_is_down_gets_an_honest_502_and_the_proxy_stays_up(
    tmp_path: Path,
) -> None:
    down = f"http://127.0.0.1:{free_port()}/v1"
    elsewhere = f"http://127.0.0.1:{free_port()}/v1"
    with start_proxy(
        "--primary", down, "--candidate", elsewhere, "--db", str(tmp_path / "p.db")
    ) as proxy:
        for _ in range(2):
            with pytest.raises(openai.InternalServerError) as caught:
                _client(proxy.base_url).chat.completions.create(model="m", **CHAT)
            assert caught.value.status_code == 502
            assert "the primary is unreachable" in str(caught.value)
        assert proxy.health()["status"] == "ok"


def test_the_candidate_never_sees_the_users_credentials(
    clean_engine: RunningEngine, tmp_path: Path
) -> None:
    # No engine reports the headers it received, so the candidate here is an observer that
    # records them and answers one fixed chat completion.
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    seen: list[dict[str, str]] = []

    async def chat(request: Request) -> JSONResponse:
        seen.append(dict(request.headers))
        return JSONResponse({"id": "x", "object": "chat.completion", "created": 0, "model": "m",
                             "choices": [{"index": 0, "finish_reason": "stop", "message": {
                                 "role": "assistant", "content": "4"}}]})  # fmt: skip

    observer = Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])
    candidate_key = "sk-candidate-own-key-0c5e2b"
    with (
        serve_in_thread(observer) as candidate,
        start_proxy(
            "--primary", clean_engine.base_url, "--candidate", candidate + "/v1",
            "--sample", "1", "--db", str(tmp_path / "p.db"),
            "--candidate-key-env", "SERVEGATE_TEST_CANDIDATE_KEY",
            env={"SERVEGATE_TEST_CANDIDATE_KEY": candidate_key},
        ) as proxy,
    ):  # fmt: skip
        headers = {"Authorization": f"Bearer {USER_KEY}", "Cookie": COOKIE,
                   "x-api-key": USER_KEY, "Content-Type": "application/json"}  # fmt: skip
        status, _ = _post(proxy.base_url + "/chat/completions", json.dumps(CHAT).encode(), headers)
        assert status == 200
        proxy.wait_health("mirror_pairs", 1)
    assert len(seen) == 1
    assert seen[0]["authorization"] == f"Bearer {candidate_key}"
    assert USER_KEY not in json.dumps(seen)
    assert "cookie" not in seen[0]
    assert "x-api-key" not in seen[0]


@pytest.mark.parametrize("behaviour", ["500", "slow"])
def test_a_shadow_candidate_that_fails_or_is_slow_leaves_the_users_answers_and_latency_alone(
    clean_engine: RunningEngine, tmp_path: Path, behaviour: str
) -> None:
    """FAULTS 45: every chat is mirrored to a candidate that answers HTTP 500, or answers only
    after 3 s. The user's status, bytes (as the engine's own, ids aside) and latency stay those
    of the primary alone; the candidate's failures are counted against it."""
    import statistics
    import time

    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    async def candidate_chat(request: Request) -> JSONResponse:
        await request.body()
        if behaviour == "slow":
            await asyncio.sleep(3)
            message = {"role": "assistant", "content": "4"}
            choice = {"index": 0, "finish_reason": "stop", "message": message}
            return JSONResponse({"object": "chat.completion", "choices": [choice]})
        return JSONResponse({"error": {"message": "boom", "type": "server_error"}}, 500)

    observer = Starlette(routes=[Route("/v1/chat/completions", candidate_chat, methods=["POST"])])
    data = json.dumps(CHAT).encode()
    url = clean_engine.base_url + "/chat/completions"

    def timed(target: str) -> tuple[float, int, bytes]:
        began = time.monotonic()
        status, body = _post(target, data)
        return time.monotonic() - began, status, body

    with (
        serve_in_thread(observer) as candidate,
        start_proxy("--primary", clean_engine.base_url, "--candidate", candidate + "/v1",
                    "--sample", "1", "--candidate-timeout-s", "10",
                    "--db", str(tmp_path / "p.db")) as proxy,
    ):  # fmt: skip
        timed(url)  # warm: the engine's prompt cache, the proxy's first connection
        timed(proxy.base_url + "/chat/completions")
        direct, proxied = [], []
        for _ in range(4):  # interleaved, so both see the same machine load
            direct.append(timed(url))
            proxied.append(timed(proxy.base_url + "/chat/completions"))
        text = proxy.metrics()
        deadline = time.monotonic() + 30
        while (
            time.monotonic() < deadline and metric(text, "servegate_proxy_mirror_pairs_total") < 5
        ):
            time.sleep(0.2)
            text = proxy.metrics()
    assert {s for _, s, _ in direct + proxied} == {200}
    assert {json.dumps(normalised_body(b)) for _, _, b in direct + proxied} == {
        json.dumps(normalised_body(direct[0][2]))
    }
    slow_d = statistics.median(t for t, _, _ in direct)
    slow_p = statistics.median(t for t, _, _ in proxied)
    print(f"{behaviour}: direct median {slow_d * 1000:.0f} ms, proxied {slow_p * 1000:.0f} ms, "
          f"slowest proxied {max(t for t, _, _ in proxied) * 1000:.0f} ms")  # fmt: skip
    assert max(t for t, _, _ in proxied) < 2.5  # never the candidate's 3 s
    assert slow_p < slow_d * 1.5 + 0.15
    if behaviour == "500":
        assert metric(text, "servegate_proxy_errors_total", side="candidate") >= 5
    assert metric(text, "servegate_proxy_errors_total", side="primary") == 0
