"""OpenAIEndpoint construction: misuse raises EndpointError without leaking secrets."""

from __future__ import annotations

import asyncio

import pytest

from servegate.endpoints.errors import EndpointError
from servegate.endpoints.http import OpenAIEndpoint, open_endpoint
from servegate.endpoints.protocol import Endpoint
from servegate.endpoints.scripted import ScriptedServer, chat_stream, reply_stream


def test_missing_api_key_variable_is_named_and_never_its_value(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("SERVEGATE_MISSING_KEY", raising=False)
    with pytest.raises(EndpointError, match="SERVEGATE_MISSING_KEY") as raised:
        OpenAIEndpoint("baseline", "http://127.0.0.1:8000/v1", api_key_env="SERVEGATE_MISSING_KEY")
    assert raised.value.exit_code == 2


def test_empty_api_key_variable_counts_as_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SERVEGATE_EMPTY_KEY", "")
    with pytest.raises(EndpointError, match="SERVEGATE_EMPTY_KEY"):
        OpenAIEndpoint("baseline", "http://127.0.0.1:8000/v1", api_key_env="SERVEGATE_EMPTY_KEY")


@pytest.mark.parametrize(
    "url",
    ["ftp://host/v1", "127.0.0.1:8000", "http:///v1", "http://user:sk-secret@host/v1"],
    ids=["scheme", "no-scheme", "no-host", "credentials"],
)
def test_bad_base_url_is_refused_without_echoing_credentials(url: str) -> None:
    with pytest.raises(EndpointError) as raised:
        OpenAIEndpoint("candidate", url)
    assert "sk-secret" not in str(raised.value)


def test_base_url_is_normalised_and_repr_holds_no_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SERVEGATE_KEY", "sk-canary")
    endpoint = open_endpoint("candidate", "http://127.0.0.1:8000/v1/", api_key_env="SERVEGATE_KEY")
    assert endpoint.base_url == "http://127.0.0.1:8000/v1"
    assert endpoint.name == "candidate"
    assert "sk-canary" not in repr(endpoint)


def test_endpoint_satisfies_the_protocol() -> None:
    endpoint: Endpoint = OpenAIEndpoint("baseline", "http://127.0.0.1:8000/v1")
    assert endpoint.base_url.endswith("/v1")


async def test_raw_path_may_not_leave_the_endpoint_origin() -> None:
    async with OpenAIEndpoint("baseline", "http://127.0.0.1:9/v1") as endpoint:
        with pytest.raises(EndpointError, match="origin"):
            await endpoint.raw("GET", "http://169.254.169.254/latest")


async def test_ttft_of_a_request_queued_for_a_pooled_connection_leaves_out_the_wait() -> None:
    # One connection, two concurrent streams: the second waits ~0.5 s for the first to finish.
    stream = reply_stream(chat_stream("a", "b", "c"), first_delay_s=0.2, delay_s=0.05)
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    async with (
        ScriptedServer().route("/v1/chat/completions", stream) as srv,
        OpenAIEndpoint("candidate", srv.url, max_connections=1) as endpoint,
    ):
        results = await asyncio.gather(endpoint.chat(body), endpoint.chat(body))
    assert [r.error for r in results] == [None, None]
    first, second = sorted((r.timing for r in results), key=lambda t: t.done_ns or 0)
    assert first.done_ns is not None
    first_ms = (first.done_ns - first.sent_ns) / 1e6
    assert first_ms > 400
    assert second.ttft_ms is not None
    assert 200 <= second.ttft_ms < first_ms  # about the server's 0.25 s, not 0.25 s + first_ms
    assert second.queued_ns is not None
    assert (second.sent_ns - second.queued_ns) / 1e6 > 300
