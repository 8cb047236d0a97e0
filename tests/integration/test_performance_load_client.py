"""The performance gate's load is sent the way `servegate bench` sends it: no retries (a retried
request's timing would be its last attempt's and the 429/503 it retried would vanish), and as many
connections as the concurrency asked (a pool of 64 would queue the rest in the client and count
that wait as the server's)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack

import pytest

from servegate.config.models import GateConfig
from servegate.endpoints.http import OpenAIEndpoint
from servegate.endpoints.scripted import (
    Conn,
    Request,
    ScriptedServer,
    chat_stream,
    reply_status,
    reply_stream,
)
from servegate.gates import performance
from servegate.gates.pair import EndpointPair

CHAT = "/v1/chat/completions"


def _config(**performance_settings: object) -> GateConfig:
    # One block a side and no further look: these tests read the load client, not the judgement.
    settings = {"blocks": 1, "max_blocks": 1, "warmup": 0, "isolated_prompts": 0,
                "output_tokens": 2, "server_metrics_interval_s": None,
                **performance_settings}  # fmt: skip
    return GateConfig.model_validate(
        {"baseline": {"url": "http://127.0.0.1:9/v1"}, "candidate": {"url": "http://127.0.0.1:8/v1"},
         "gates": ["performance"], "request_deadline_s": 10, "performance": settings}
    )  # fmt: skip


@pytest.fixture
async def servers() -> AsyncIterator[tuple[ScriptedServer, ScriptedServer]]:
    async with ScriptedServer() as b, ScriptedServer() as c:
        yield b, c


async def _collect(
    servers: tuple[ScriptedServer, ScriptedServer], cfg: GateConfig
) -> performance.PerformanceEvidence:
    async with AsyncExitStack() as stack:
        b = await stack.enter_async_context(OpenAIEndpoint("baseline", servers[0].url))
        c = await stack.enter_async_context(OpenAIEndpoint("candidate", servers[1].url))
        return await performance.collect(EndpointPair(b, c, model="m"), cfg)


async def test_a_rate_limited_request_under_load_is_not_retried(
    servers: tuple[ScriptedServer, ScriptedServer],
) -> None:
    for server in servers:
        server.route(CHAT, reply_status(429, b"slow down", headers={"Retry-After": "0"}))
    evidence = await _collect(servers, _config(concurrency=2, requests_per_block=4))
    # The baseline's pilots (is concurrency 2 served whole?) are load too: each sent once.
    piloted = sum(p.answers for p in evidence.pilots)
    assert piloted >= 2
    for side, server, before in zip(("baseline", "candidate"), servers, (piloted, 0), strict=True):
        [block] = evidence.side_blocks(side)
        errors = [x.completion.error for x in block.exchanges]
        assert [e.category.value if e else None for e in errors] == ["rate_limited"] * 4
        assert [x.completion.attempts for x in block.exchanges] == [1] * 4
        # one request each: nothing retried behind our back
        assert len(server.requests) == before + 4, side


async def _held(request: Request, conn: Conn) -> None:
    await asyncio.sleep(0.3)  # every stream's request is in flight at once
    await reply_stream(chat_stream("a", "b"))(request, conn)


async def test_the_load_opens_as_many_connections_as_its_concurrency(
    servers: tuple[ScriptedServer, ScriptedServer],
) -> None:
    for server in servers:
        server.route(CHAT, _held)
    evidence = await _collect(servers, _config(concurrency=96, requests_per_block=96))
    for side, server in zip(("baseline", "candidate"), servers, strict=True):
        [block] = evidence.side_blocks(side)
        assert [x.completion.error for x in block.exchanges] == [None] * 96
        assert server.connections == 96, side


@pytest.mark.parametrize(
    ("within_s", "blocks", "stopped"), [(None, 3, False), (60.0, 3, False), (0.001, 1, True)]
)
async def test_the_looks_after_the_first_run_only_while_they_fit_looks_within_s(
    servers: tuple[ScriptedServer, ScriptedServer],
    within_s: float | None,
    blocks: int,
    stopped: bool,
) -> None:
    # One block a side cannot bound an interval, so every latency is undecided after each look
    # and the gate asks for the next, up to max_blocks — unless the next would not fit.
    for server in servers:
        server.route(CHAT, reply_stream(chat_stream("a", "b")))
    cfg = _config(concurrency=1, requests_per_block=2, max_blocks=3, looks_within_s=within_s)
    evidence = await _collect(servers, cfg)
    assert [len(evidence.side_blocks(side)) for side in ("baseline", "candidate")] == [blocks] * 2
    if stopped:
        assert evidence.looks_stopped is not None
        assert evidence.looks_stopped.startswith("the look at 3 blocks a side would take about ")
        left = "0 s of the 0 s for later looks (performance.looks_within_s"
        assert left in evidence.looks_stopped
    else:
        assert evidence.looks_stopped is None
