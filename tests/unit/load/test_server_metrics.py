"""The server's gauges during a load phase, scraped from a real aiohttp server on loopback."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from aiohttp import web

from servegate.endpoints.exposition import parse_exposition
from servegate.endpoints.http import OpenAIEndpoint
from servegate.load.server_metrics import (
    ServerEvidence,
    ServerSampler,
    endpoint_scrape,
    read_gauges,
    summarise_server,
)

Handler = Callable[[web.Request], web.Response]
Serve = Callable[[Handler], Awaitable[str]]


@pytest.fixture
async def serve() -> AsyncIterator[Serve]:
    """`url = await serve(handler)`: GET /metrics answered by `handler` on 127.0.0.1."""
    runners: list[web.AppRunner] = []

    async def start(handler: Handler) -> str:
        app = web.Application()

        async def metrics(request: web.Request) -> web.Response:
            return handler(request)

        app.router.add_get("/metrics", metrics)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        runners.append(runner)
        port = runner.addresses[0][1]
        return f"http://127.0.0.1:{port}/v1"

    yield start
    for runner in runners:
        await runner.cleanup()


def _counting(texts: list[str]) -> tuple[Handler, list[int]]:
    """A handler answering texts[0], texts[1], … (the last one again), counting its calls."""
    calls = [0]

    def handler(request: web.Request) -> web.Response:
        text = texts[min(calls[0], len(texts) - 1)]
        calls[0] += 1
        return web.Response(text=text, content_type="text/plain")

    return handler, calls


async def _sample(url: str, seconds: float, interval_s: float = 0.02) -> ServerEvidence:
    endpoint = OpenAIEndpoint("metrics", url)
    try:
        async with ServerSampler(endpoint_scrape(endpoint), interval_s) as sampler:
            await asyncio.sleep(seconds)
    finally:
        await endpoint.aclose()
    evidence = sampler.evidence()
    assert evidence is not None
    return evidence


async def test_vllm_gauges_are_sampled_while_the_phase_runs(serve: Serve) -> None:
    texts = [
        f'vllm:num_requests_running{{model_name="m"}} {n}\n'
        f'vllm:num_requests_waiting{{model_name="m"}} {2 * n}\n'
        f'vllm:kv_cache_usage_perc{{engine="0"}} {n / 10}\n'
        f'vllm:kv_cache_usage_perc{{engine="1"}} 0.05\n'
        for n in (1, 2, 3, 4)
    ]
    handler, calls = _counting(texts)
    evidence = await _sample(await serve(handler), 0.3)
    # The last scrape may have been cut off when the phase ended, before or after it arrived.
    assert 4 <= len(evidence.readings) <= calls[0] <= evidence.scrapes <= len(evidence.readings) + 1
    summary = summarise_server([evidence])
    assert summary.measured
    gauges = {g.key: g for g in summary.gauges}
    assert gauges["requests_running"].source == "vllm:num_requests_running"
    assert gauges["requests_running"].max == 4
    assert gauges["requests_waiting"].max == 8
    # Two engines: the fuller one counts.
    assert gauges["kv_cache_usage"].max == pytest.approx(0.4)
    assert 1 < gauges["requests_running"].mean < 4
    running = gauges["requests_running"]
    assert f"requests_running mean {running.mean:.3g}, max 4 (vllm:num_requests_running, " in (
        summary.describe()
    )


async def test_no_metrics_endpoint_is_not_measured_after_one_request(serve: Serve) -> None:
    calls = [0]

    def missing(request: web.Request) -> web.Response:
        calls[0] += 1
        raise web.HTTPNotFound()

    evidence = await _sample(await serve(missing), 0.2)
    summary = summarise_server([evidence])
    assert (summary.measured, calls[0], summary.scrapes) == (False, 1, 1)
    assert summary.reason == "GET /metrics answered HTTP 404"
    assert summary.describe() == "not measured: GET /metrics answered HTTP 404"


async def test_a_metrics_page_without_the_known_gauges_says_so(serve: Serve) -> None:
    handler, _ = _counting(["process_cpu_seconds_total 12.5\npython_info 1\n"])
    summary = summarise_server([await _sample(await serve(handler), 0.1)])
    assert not summary.measured
    assert summary.reason.startswith("/metrics has none of the known gauges")


async def test_html_with_200_is_no_metrics(serve: Serve) -> None:
    def html(request: web.Request) -> web.Response:
        return web.Response(text="<html><body>hello</body></html>", content_type="text/html")

    summary = summarise_server([await _sample(await serve(html), 0.1)])
    assert (summary.measured, summary.reason) == (
        False,
        "GET /metrics answered no Prometheus samples",
    )


async def test_a_refused_connection_is_not_measured_never_an_error() -> None:
    endpoint = OpenAIEndpoint("metrics", "http://127.0.0.1:9/v1")
    try:
        async with ServerSampler(endpoint_scrape(endpoint), 0.01) as sampler:
            await asyncio.sleep(0.05)
    finally:
        await endpoint.aclose()
    evidence = sampler.evidence()
    assert evidence is not None
    summary = summarise_server([evidence])
    assert not summary.measured
    assert summary.reason.startswith("GET /metrics: ")


async def test_a_phase_shorter_than_the_interval_keeps_the_scrape_taken_as_it_started(
    serve: Serve,
) -> None:
    handler, _ = _counting(["tgi_queue_size 3\ntgi_batch_current_size 5\n"])
    summary = summarise_server([await _sample(await serve(handler), 0.0, interval_s=10)])
    assert summary.measured
    assert {g.key: (g.source, g.max) for g in summary.gauges} == {
        "requests_running": ("tgi_batch_current_size", 5.0),
        "requests_waiting": ("tgi_queue_size", 3.0),
    }


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("vllm:gpu_cache_usage_perc 0.5\nvllm:kv_cache_usage_perc 0.25",
         {"kv_cache_usage": ("vllm:kv_cache_usage_perc", 0.25)}),
        ("vllm:gpu_cache_usage_perc 0.5", {"kv_cache_usage": ("vllm:gpu_cache_usage_perc", 0.5)}),
        ('sglang:num_running_reqs{tp_rank="0"} 2\nsglang:num_running_reqs{tp_rank="1"} 3\n'
         "sglang:num_queue_reqs 1\nsglang:token_usage 0.28",
         {"requests_running": ("sglang:num_running_reqs", 5.0),
          "requests_waiting": ("sglang:num_queue_reqs", 1.0),
          "kv_cache_usage": ("sglang:token_usage", 0.28)}),
        ("llamacpp:requests_processing 4\nllamacpp:requests_deferred 46",
         {"requests_running": ("llamacpp:requests_processing", 4.0),
          "requests_waiting": ("llamacpp:requests_deferred", 46.0)}),
    ],
    ids=["vllm-new-name-first", "vllm-old-name", "sglang-ranks-summed", "llamacpp"],
)  # fmt: skip
def test_each_server_family_maps_to_the_same_gauges(
    text: str, expected: dict[str, tuple[str, float]]
) -> None:
    assert read_gauges(parse_exposition(text)) == expected


def test_no_scrape_asked_for_is_none_not_a_not_measured() -> None:
    assert ServerSampler(None).evidence() is None
