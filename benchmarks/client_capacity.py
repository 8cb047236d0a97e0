"""Client capacity and timing accuracy of servegate's streaming client, against ground truth.

The server (`stream_server.py`, pinned to core 1) logs when it wrote every event; each client
(pinned to core 0) logs when it saw every token chunk. Both stamp with `perf_counter_ns`
(CLOCK_MONOTONIC, shared across processes), so reported-minus-true is computed per request.

Clients compared in the same run:
- servegate: `servegate.endpoints.http.OpenAIEndpoint.chat` (SSE parser, assembly, timing);
- servegate-bench: the step path of `servegate bench` (`load.driver.run_step`, then
  `load.bench.evaluate_step`: metrics, the correctness checks of every answer, lengths, the
  client monitor), evaluation included in the measured time;
- raw: a minimal aiohttp client (split on blank lines, json.loads each event), the least a
  correct client can do;
- raw-count: aiohttp that only counts `data:` lines per read, no JSON at all (stamps a read
  that holds a data line as one chunk): the limit of a client on aiohttp (the issue's
  "non-parsing client");
- proto-count: the same counting below aiohttp (asyncio Protocol + httptools, as servegate's
  own HTTP client since the wire client): the limit of a Python client on asyncio;
- vllm: `vllm bench serve`'s request function from the released wheel (SERVEGATE_VLLM_LIB);
- guidellm: `guidellm run` with a local tokenizer (throughput and its own TTFT/ITL only: it
  cannot tag requests, so no per-request error).

Run everything:  python benchmarks/client_capacity.py run
One load (what `run` starts under `taskset -c 0`):  python benchmarks/client_capacity.py load ...
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import functools
import json
import os
import platform
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SERVER = HERE / "stream_server.py"
CLIENT_CORE = "0"
SERVER_CORE = "1"
ROLE_MARGIN_NS = 1_000_000

Record = dict[str, Any]
Request = Callable[[dict[str, Any]], Awaitable[Record]]


@dataclass(frozen=True, slots=True)
class Scenario:
    """One server configuration and the loads driven against it."""

    name: str
    concurrency: int
    ttft_ms: float = 0.0
    itl_ms: float = 0.0
    tokens: int = 64
    tokens_per_event: int = 1
    logprobs: bool = False
    kinds: tuple[str, ...] = ("servegate-bench", "servegate", "raw", "raw-count", "guidellm")
    max_seconds: float | None = None  # overrides the run's bound (long streams, low rates)


SCENARIOS = (
    *(Scenario(f"capacity-c{c}", c) for c in (1, 16, 64, 256)),
    Scenario(
        "accuracy-c256",
        256,
        ttft_ms=50,
        itl_ms=5,
        kinds=("servegate", "servegate-default", "raw", "guidellm"),
    ),
    Scenario("accuracy-c64", 64, ttft_ms=50, itl_ms=5, kinds=("servegate", "raw")),
    Scenario(
        "packed4-c16",
        16,
        ttft_ms=50,
        itl_ms=5,
        tokens_per_event=4,
        logprobs=True,
        kinds=("servegate", "raw"),
        max_seconds=10,
    ),
)


# ---------------------------------------------------------------------------------------------
# clients (run inside the `load` subprocess)


def request_body(key: str, tokens: int, *, logprobs: bool) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": "bench",
        "messages": [{"role": "user", "content": "Count."}],
        "max_tokens": tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
        "user": key,  # ties the client's record to the server's ground truth
    }
    if logprobs:
        body["logprobs"] = True
    return body


async def servegate_client(
    url: str, concurrency: int, *, pool: bool = True
) -> tuple[Request, Callable[[], Awaitable]]:
    from servegate.endpoints.http import OpenAIEndpoint

    # pool=False keeps OpenAIEndpoint's default connection limit, whatever the concurrency
    options = {"max_connections": concurrency} if pool else {}
    endpoint = OpenAIEndpoint("bench", f"{url}/v1", **options)

    async def request(body: dict[str, Any]) -> Record:
        completion = await endpoint.chat(body)
        timing = completion.timing
        usage = completion.usage
        return {
            "key": body["user"],
            "ok": completion.ok,
            "error": str(completion.error) if completion.error else None,
            "sent_ns": timing.sent_ns,
            "chunk_ns": list(timing.token_chunk_ns),
            "chunk_tokens": list(timing.token_chunk_tokens),
            "tokens": usage.completion_tokens if usage else None,
        }

    return request, endpoint.aclose


async def raw_client(url: str, concurrency: int) -> tuple[Request, Callable[[], Awaitable]]:
    import aiohttp

    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency))
    target = f"{url}/v1/chat/completions"
    headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}

    async def request(body: dict[str, Any]) -> Record:
        data = json.dumps(body).encode()
        chunk_ns: list[int] = []
        chunk_tokens: list[int] = []
        tokens = None
        sent_ns = time.perf_counter_ns()
        async with session.post(target, data=data, headers=headers) as response:
            buf = b""
            async for piece in response.content.iter_any():
                now = time.perf_counter_ns()
                *events, buf = (buf + piece).split(b"\n\n")
                for event in events:
                    if not event.startswith(b"data: ") or event == b"data: [DONE]":
                        continue
                    chunk = json.loads(event[6:])
                    choices = chunk["choices"]
                    if choices and choices[0]["delta"].get("content"):
                        lp = choices[0].get("logprobs")
                        chunk_ns.append(now)
                        chunk_tokens.append(len(lp["content"]) if lp else 1)
                    if chunk.get("usage"):
                        tokens = chunk["usage"]["completion_tokens"]
            ok = response.status == 200
        return {
            "key": body["user"],
            "ok": ok,
            "error": None if ok else f"HTTP {response.status}",
            "sent_ns": sent_ns,
            "chunk_ns": chunk_ns,
            "chunk_tokens": chunk_tokens,
            "tokens": tokens,
        }

    return request, session.close


async def raw_count_client(url: str, concurrency: int) -> tuple[Request, Callable[[], Awaitable]]:
    """No parsing at all: counts `data:` lines in each read (the role chunk and [DONE] too).

    A read holding data lines is stamped as one chunk of that many lines. The role chunk alone
    in the first read is dropped; the finish, usage and [DONE] lines are discounted from the
    token count only, so its TTFT and rate are comparable, its per-chunk ITL is not. Not a
    correct client (it would count any data line): the ceiling a parsing client is held to."""
    import aiohttp

    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency))
    target = f"{url}/v1/chat/completions"
    headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}

    async def request(body: dict[str, Any]) -> Record:
        data = json.dumps(body).encode()
        chunk_ns: list[int] = []
        chunk_tokens: list[int] = []
        sent_ns = time.perf_counter_ns()
        async with session.post(target, data=data, headers=headers) as response:
            async for piece in response.content.iter_any():
                lines = piece.count(b"data:")
                if lines:
                    chunk_ns.append(time.perf_counter_ns())
                    chunk_tokens.append(lines)
            ok = response.status == 200
        # the role, finish and usage chunks and [DONE] are data lines that carry no token
        events = sum(chunk_tokens) - 4
        if chunk_tokens and chunk_tokens[0] == 1:  # the role chunk came alone: not a token
            chunk_ns.pop(0)
            chunk_tokens.pop(0)
        return {
            "key": body["user"],
            "ok": ok,
            "error": None if ok else f"HTTP {response.status}",
            "sent_ns": sent_ns,
            "chunk_ns": chunk_ns,
            "chunk_tokens": chunk_tokens,
            "tokens": events,
        }

    return request, session.close


async def proto_count_client(url: str, concurrency: int) -> tuple[Request, Callable[[], Awaitable]]:
    """raw-count below aiohttp: an asyncio Protocol per keep-alive connection, httptools for
    HTTP, `data:` lines counted per socket read in `data_received` — no StreamReader, no task
    switch per read. The floor for a Python client on asyncio; the same records as raw-count."""
    from urllib.parse import urlsplit

    import httptools

    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    loop = asyncio.get_running_loop()
    idle: list[Any] = []

    class Conn(asyncio.Protocol):
        def __init__(self) -> None:
            self.transport: Any = None
            self.done: asyncio.Future[None] | None = None
            self.chunk_ns: list[int] = []
            self.chunk_tokens: list[int] = []
            self.lines = 0
            self.status = 0
            self.keep = False
            self.parser = httptools.HttpResponseParser(self)

        def connection_made(self, transport: Any) -> None:
            self.transport = transport

        def data_received(self, data: bytes) -> None:
            self.lines = 0
            self.parser.feed_data(data)
            if self.lines:
                self.chunk_ns.append(time.perf_counter_ns())
                self.chunk_tokens.append(self.lines)
            if self.keep and self.done is not None and not self.done.done():
                self.done.set_result(None)

        def connection_lost(self, exc: Exception | None) -> None:
            if self.done is not None and not self.done.done():
                self.done.set_exception(ConnectionError("lost"))

        def on_body(self, body: bytes) -> None:
            self.lines += body.count(b"data:")

        def on_message_complete(self) -> None:
            self.status = self.parser.get_status_code()
            self.keep = True

    async def request(body: dict[str, Any]) -> Record:
        data = json.dumps(body).encode()
        head = (
            f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}:{port}\r\n"
            "Content-Type: application/json\r\nAccept: text/event-stream\r\n"
            f"Content-Length: {len(data)}\r\n\r\n"
        ).encode()
        conn = idle.pop() if idle else (await loop.create_connection(Conn, host, port))[1]
        conn.done = loop.create_future()
        conn.chunk_ns, conn.chunk_tokens, conn.keep = [], [], False
        sent_ns = time.perf_counter_ns()
        conn.transport.write(head + data)
        await conn.done
        idle.append(conn)
        chunk_ns, chunk_tokens = conn.chunk_ns, conn.chunk_tokens
        events = sum(chunk_tokens) - 4  # as raw-count: role, finish, usage, [DONE]
        if chunk_tokens and chunk_tokens[0] == 1:
            chunk_ns.pop(0)
            chunk_tokens.pop(0)
        ok = conn.status == 200
        return {
            "key": body["user"],
            "ok": ok,
            "error": None if ok else f"HTTP {conn.status}",
            "sent_ns": sent_ns,
            "chunk_ns": chunk_ns,
            "chunk_tokens": chunk_tokens,
            "tokens": events,
        }

    async def close() -> None:
        for conn in idle:
            conn.transport.close()

    return request, close


async def vllm_client(url: str, concurrency: int) -> tuple[Request, Callable[[], Awaitable]]:
    """`vllm bench serve`'s own request function, run as released: its module
    (`vllm/benchmarks/lib/endpoint_request_func.py`) is loaded from the folder in the
    SERVEGATE_VLLM_LIB environment variable (unpacked from the vllm wheel; it needs `regex` and
    `tqdm` importable), on an aiohttp session shaped as `vllm bench serve` builds it. Its
    stamps are perf_counter floats, turned into the records the truth is joined with."""
    import importlib.util

    import aiohttp

    folder = os.environ.get("SERVEGATE_VLLM_LIB")
    if not folder:
        raise SystemExit("the vllm kind needs SERVEGATE_VLLM_LIB=<vllm/benchmarks/lib folder>")
    spec = importlib.util.spec_from_file_location(
        "vllm_endpoint_request_func", Path(folder) / "endpoint_request_func.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    connector = aiohttp.TCPConnector(  # as vllm/benchmarks/serve.py's make_session
        limit=concurrency,
        limit_per_host=concurrency,
        ttl_dns_cache=300,
        use_dns_cache=True,
        keepalive_timeout=60,
        enable_cleanup_closed=True,
        force_close=False,
        ssl=False,
    )
    session = aiohttp.ClientSession(
        connector=connector, trust_env=True, timeout=aiohttp.ClientTimeout(total=6 * 60 * 60)
    )

    async def request(body: dict[str, Any]) -> Record:
        given = module.RequestFuncInput(
            prompt=body["messages"][0]["content"],
            api_url=f"{url}/v1/chat/completions",
            prompt_len=1,
            output_len=body["max_tokens"],
            model=body["model"],
            extra_body={"user": body["user"], **({"logprobs": True} if "logprobs" in body else {})},
        )
        out = await module.async_request_openai_chat_completions(given, session)
        chunk_ns: list[int] = []
        if out.success:
            at = out.start_time + out.ttft
            chunk_ns.append(int(at * 1e9))
            for gap in out.itl:
                at += gap
                chunk_ns.append(int(at * 1e9))
        return {
            "key": body["user"],
            "ok": bool(out.success),
            "error": out.error or None,
            "sent_ns": int(out.start_time * 1e9),
            "chunk_ns": chunk_ns,
            "chunk_tokens": [1] * len(chunk_ns),  # it counts one token per chunk
            "tokens": out.output_tokens or None,
        }

    return request, session.close


async def servegate_default_client(
    url: str, concurrency: int
) -> tuple[Request, Callable[[], Awaitable]]:
    return await servegate_client(url, concurrency, pool=False)


CLIENTS = {
    "servegate": servegate_client,
    "servegate-default": servegate_default_client,
    "raw": raw_client,
    "raw-count": raw_count_client,
    "proto-count": proto_count_client,
    "vllm": vllm_client,
}


def bench_endpoint(url: str, concurrency: int) -> Any:
    """The endpoint `servegate bench` builds (no retries, a pool as wide as the streams)."""
    from servegate.endpoints.http import OpenAIEndpoint
    from servegate.endpoints.retry import RetryConfig
    from servegate.endpoints.transport import TimeoutConfig

    return OpenAIEndpoint(
        "bench",
        f"{url}/v1",
        timeouts=TimeoutConfig(deadline_s=60.0),
        retry=RetryConfig(max_attempts=1),
        max_connections=concurrency,
    )


def bench_item(concurrency: int, tokens: int, logprobs: bool, tag: str, index: int) -> Any:
    from servegate.load.workload import WorkItem

    key = f"warm-{index}" if index < concurrency else f"{tag}-{index}"
    body = request_body(key, tokens, logprobs=logprobs)
    return WorkItem(api="chat", body=body, label=key, max_tokens=tokens)


def bench_source(concurrency: int, tokens: int, logprobs: bool, tag: str) -> Any:
    return functools.partial(bench_item, concurrency, tokens, logprobs, tag)


async def drive_bench(args: argparse.Namespace) -> dict[str, Any]:
    """One closed-loop step of `servegate bench`: `run_step` (warm-up of one request per stream,
    then the measured phase under the client monitor) and `evaluate_step` (metrics, every
    answer's correctness checks, lengths, the client-bound judgement). The measured time is the
    measured phase plus the evaluation, so the checks are paid for. With --workers N, the step
    runs in `servegate bench --workers N`'s worker pool (N spawned processes)."""
    from servegate.load.arrival import closed_loop
    from servegate.load.bench import evaluate_step
    from servegate.load.driver import StepBounds, run_step

    endpoint = bench_endpoint(args.url, args.concurrency)
    source = bench_source(args.concurrency, args.tokens, args.logprobs, args.tag)
    pool = None
    runner = run_step
    if args.workers > 1:
        from servegate.load.workers import WorkerPool, WorkerSetup

        setup = WorkerSetup(
            functools.partial(bench_endpoint, args.url, args.concurrency),
            functools.partial(bench_source, args.concurrency, args.tokens, args.logprobs, args.tag),
        )
        pool = WorkerPool(setup, args.workers)
        await pool.ready()
        runner = pool.run_step

    bounds = StepBounds(
        requests=args.max_requests,
        duration_s=args.max_seconds,
        warmup=args.concurrency,
        deadline_s=60.0,
    )
    try:
        evidence = await runner(endpoint, source, closed_loop(args.concurrency), bounds)
    finally:
        await endpoint.aclose()
        if pool is not None:
            await pool.aclose()
    cpu0, wall0 = time.process_time(), time.perf_counter()
    step = evaluate_step(evidence, None)
    eval_cpu_s, eval_wall_s = time.process_time() - cpu0, time.perf_counter() - wall0
    records = []
    for x in evidence.exchanges:
        timing, usage = x.completion.timing, x.completion.usage
        records.append(
            {
                "key": x.item.label,
                "ok": x.completion.ok,
                "error": str(x.completion.error) if x.completion.error else None,
                "sent_ns": timing.sent_ns,
                "chunk_ns": list(timing.token_chunk_ns),
                "chunk_tokens": list(timing.token_chunk_tokens),
                "tokens": usage.completion_tokens if usage else None,
            }
        )
    return {
        "kind": args.kind,
        "wall_s": (evidence.end_ns - evidence.start_ns) / 1e9 + eval_wall_s,
        "cpu_s": evidence.client.cpu_s + eval_cpu_s,
        "eval_cpu_s": eval_cpu_s,
        "client_bound": step.client.client_bound,
        "client_bound_reasons": list(step.client.reasons),
        "worker_failures": list(getattr(step, "worker_failures", ())),  # absent in older trees
        "checked": step.correctness.checked,
        "requests": records,
    }


BENCH_KINDS = ("servegate-bench", "servegate-bench-w2")
WORKERS = {"servegate-bench-w2": 2}
BEFORE = "@before"  # e.g. servegate-bench@before: that client from --before-src
UVLOOP = "+uvloop"  # e.g. raw-count+uvloop: that client on uvloop's event loop
BOTH_CORES = "0,1"  # a second client process has no core of its own on this 2-core machine


async def drive(args: argparse.Namespace) -> dict[str, Any]:
    """Warm one request per worker, then keep `concurrency` streams busy until a bound is hit."""
    request, close = await CLIENTS[args.kind](args.url, args.concurrency)
    try:
        warm = [
            request(request_body(f"warm-{i}", args.tokens, logprobs=args.logprobs))
            for i in range(args.concurrency)
        ]
        await asyncio.gather(*warm)
        records: list[Record] = []
        issued = 0
        stop_at = time.perf_counter() + args.max_seconds

        async def worker() -> None:
            nonlocal issued
            while issued < args.max_requests and time.perf_counter() < stop_at:
                issued += 1
                body = request_body(f"{args.tag}-{issued}", args.tokens, logprobs=args.logprobs)
                records.append(await request(body))

        cpu0, wall0 = time.process_time(), time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(args.concurrency)))
        cpu_s, wall_s = time.process_time() - cpu0, time.perf_counter() - wall0
    finally:
        await close()
    return {"kind": args.kind, "wall_s": wall_s, "cpu_s": cpu_s, "requests": records}


def load_main(args: argparse.Namespace) -> None:
    # CPU time, not wall time: on a shared machine a descheduled function is not a slow one
    profiler = cProfile.Profile(time.process_time) if args.cprofile else None
    sampler = None
    if args.pyinstrument:  # a sampling profiler: less distortion of per-event costs than cProfile
        from pyinstrument import Profiler  # dev-only: pip install pyinstrument

        sampler = Profiler(interval=0.0005, async_mode="disabled")
        sampler.start()
    if profiler:
        profiler.enable()
    main = drive_bench(args) if args.kind in BENCH_KINDS else drive(args)
    if args.loop == "uvloop":
        import uvloop  # a dependency of servegate's proxy

        result = uvloop.run(main)
    else:
        result = asyncio.run(main)
    if profiler:
        profiler.disable()
        profiler.dump_stats(args.cprofile)
    if sampler is not None:
        sampler.stop()
        Path(args.pyinstrument).write_text(sampler.output_text(unicode=False, show_all=False))
    Path(args.out).write_text(json.dumps(result))


def parse_cost_main(args: argparse.Namespace) -> None:
    """Per-event CPU of each stage of servegate's stream intake against the raw client's loop,
    in process (no sockets): where the client's time per streamed request goes."""
    import importlib.util
    import timeit

    from servegate.endpoints.assembly import StreamAssembler
    from servegate.endpoints.sse import SSEParser
    from servegate.endpoints.timing import TimingRecorder

    spec = importlib.util.spec_from_file_location("stream_server", SERVER)
    assert spec is not None
    assert spec.loader is not None
    server = importlib.util.module_from_spec(spec)
    sys.modules["stream_server"] = server  # dataclasses look their module up there
    spec.loader.exec_module(server)

    def unchunk(framed: bytes) -> bytes:  # strip HTTP/1.1 chunk framing, as aiohttp does
        out = b""
        while framed:
            size_hex, _, rest = framed.partition(b"\r\n")
            size = int(size_hex, 16)
            if size == 0:
                break
            out, framed = out + rest[:size], rest[size + 2 :]
        return out

    def measure(logprobs: bool) -> None:
        wire = server.Wire(logprobs=logprobs, usage=True)
        events = [unchunk(wire.role), *[unchunk(wire.tokens(1))] * 64, unchunk(wire.finish(64))]
        body = b"".join(events)
        parsed = SSEParser().feed(body, 1)

        def feed_whole() -> None:
            SSEParser().feed(body, 1)

        def feed_each() -> None:
            parser = SSEParser()
            for event in events:
                parser.feed(event, 1)

        def assemble() -> None:
            assembler = StreamAssembler(TimingRecorder(), chat=True)
            for event in parsed:
                assembler.add(event)

        def json_only() -> None:
            for event in parsed:
                if event.data != "[DONE]":
                    json.loads(event.data)

        def raw_loop() -> None:
            for event in body.split(b"\n\n"):
                if event.startswith(b"data: ") and event != b"data: [DONE]":
                    chunk = json.loads(event[6:])
                    choices = chunk["choices"]
                    if choices and choices[0]["delta"].get("content"):
                        pass

        def fused_whole() -> None:  # what reception does now: no SSEEvent per plain event
            SSEParser().feed_into(body, 1, StreamAssembler(TimingRecorder(), chat=True))

        def fused_each() -> None:
            parser = SSEParser()
            assembler = StreamAssembler(TimingRecorder(), chat=True)
            for event in events:
                parser.feed_into(event, 1, assembler)

        stages: tuple[tuple[str, Callable[[], None]], ...] = (
            ("servegate SSEParser.feed, whole body in one chunk", feed_whole),
            ("servegate SSEParser.feed, one event per chunk", feed_each),
            ("servegate StreamAssembler.add (json.loads included)", assemble),
        )
        if hasattr(SSEParser, "feed_into"):  # absent in trees before the fused intake
            stages += (
                ("servegate feed_into + add_data, whole body (fused)", fused_whole),
                ("servegate feed_into + add_data, one event per chunk", fused_each),
            )
        stages += (
            ("  json.loads alone", json_only),
            ("raw client loop (split + json.loads)", raw_loop),
        )
        print(f"logprobs={logprobs}: {len(events)} events, {len(body)} bytes per response")
        for name, fn in stages:
            best = min(timeit.repeat(fn, number=args.number, repeat=5, timer=time.process_time))
            print(f"  {name:54s} {best / args.number / len(events) * 1e6:6.2f} us/event")

    def long_logprobs() -> None:
        # assembling a logprob stream must stay linear in its length (it was quadratic)
        wire = server.Wire(logprobs=True, usage=True)
        token = SSEParser().feed(unchunk(wire.tokens(1)), 1)[0]
        print("logprob stream assembly, one token per event (CPU per token, best of 3):")
        for tokens in (256, 4096, 8192):
            events = [token] * tokens

            def assemble_long(events: list[Any] = events) -> None:
                assembler = StreamAssembler(TimingRecorder(), chat=True)
                for event in events:
                    assembler.add(event)

            best = min(timeit.repeat(assemble_long, number=1, repeat=3, timer=time.process_time))
            per_token_us = best / tokens * 1e6
            print(f"  {tokens:5d} tokens: {best * 1e3:8.1f} ms, {per_token_us:6.2f} us/token")

    for logprobs in (False, True):
        measure(logprobs)
    long_logprobs()


# ---------------------------------------------------------------------------------------------
# ground truth and metrics


def pct(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered) + 0.5) - 1))]


def judge(result: dict[str, Any], truth: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Rates from the load; reported-minus-true TTFT and ITL per request from the server's log."""
    records = result["requests"]
    ok = [r for r in records if r["ok"]]
    tokens = sum(r["tokens"] or sum(r["chunk_tokens"]) for r in ok)
    ttft_err, lag, itl_err, tok_err, tok_reported, tok_true = [], [], [], [], [], []
    mismatched = token_miscount = buffered = early = 0
    for r in ok:
        t = truth.get(r["key"])
        if t is None or not r["chunk_ns"] or not t["event_ns"]:
            mismatched += 1
            continue
        buffered += t["buffered_writes"] > 0
        c, w = r["chunk_ns"], t["event_ns"]
        # seen well before the server wrote it: TTFT started on the role chunk (a margin, since
        # the server can be descheduled between its write and its stamp)
        early += c[0] < w[0] - ROLE_MARGIN_NS
        reported_ttft = c[0] - r["sent_ns"]
        true_ttft = w[0] - t["recv_ns"]
        ttft_err.append((reported_ttft - true_ttft) / 1e6)
        lag.append((c[0] - w[0]) / 1e6)
        if len(c) != len(w):
            mismatched += 1
            continue
        token_miscount += r["chunk_tokens"] != t["event_tokens"]
        for i in range(1, len(c)):
            itl_err.append(((c[i] - c[i - 1]) - (w[i] - w[i - 1])) / 1e6)
            reported = (c[i] - c[i - 1]) / 1e6 / max(r["chunk_tokens"][i], 1)
            true = (w[i] - w[i - 1]) / 1e6 / t["event_tokens"][i]
            tok_reported.append(reported)
            tok_true.append(true)
            tok_err.append(reported - true)
    n = len(ok)
    return {
        "requests": n,
        "failed": len(records) - n,
        "rps": n / result["wall_s"],
        "tokens_per_s": tokens / result["wall_s"],
        "cpu_s_per_1000": 1000 * result["cpu_s"] / n if n else None,
        "ttft_err_p50_ms": pct(ttft_err, 50),
        "ttft_err_p99_ms": pct(ttft_err, 99),
        "arrival_lag_p50_ms": pct(lag, 50),
        "arrival_lag_p99_ms": pct(lag, 99),
        "itl_err_p50_ms": pct(itl_err, 50),
        "itl_err_p99_ms": pct(itl_err, 99),
        "itl_tok_reported_p50_ms": pct(tok_reported, 50),
        "itl_tok_true_p50_ms": pct(tok_true, 50),
        "itl_tok_err_p50_ms": pct(tok_err, 50),
        "itl_tok_abs_err_p99_ms": pct([abs(e) for e in tok_err], 99),
        "chunks_unmatched": mismatched,
        "token_count_wrong": token_miscount,
        "ttft_before_first_token": early,
        "server_buffered_requests": buffered,
        "errors": sorted({r["error"] for r in records if r["error"]})[:3],
        # servegate-bench kinds: the client-bound flag servegate raised about itself
        "client_bound": result.get("client_bound"),
        "client_bound_reasons": result.get("client_bound_reasons"),
    }


def judge_guidellm(path: Path, cpu_s: float) -> dict[str, Any]:
    """Throughput and GuideLLM's own TTFT/ITL from its JSON report (no ground-truth join)."""
    bench = json.loads(path.read_text())["benchmarks"][0]
    metrics = bench["metrics"]
    done = metrics["request_totals"]["successful"]
    failed = metrics["request_totals"]["errored"] + metrics["request_totals"]["incomplete"]
    duration = bench["duration"]
    out_tokens = metrics["output_token_count"]["successful"]["total_sum"]

    def stat(name: str, key: str) -> float | None:
        summary = metrics[name]["successful"]
        return summary["median"] if key == "p50" else summary["percentiles"][key]

    return {
        "requests": done,
        "failed": failed,
        "rps": done / duration,
        "tokens_per_s": out_tokens / duration,
        "cpu_s_per_1000": 1000 * cpu_s / done if done else None,
        "reported_ttft_p50_ms": stat("time_to_first_token_ms", "p50"),
        "reported_ttft_p99_ms": stat("time_to_first_token_ms", "p99"),
        "reported_itl_p50_ms": stat("inter_token_latency_ms", "p50"),
        "concurrency_p50": metrics["request_concurrency"]["successful"]["median"],
    }


def true_latency(truth: dict[str, dict[str, Any]]) -> dict[str, float | None]:
    """The server-side TTFT and per-token ITL distributions (what a perfect client reports)."""
    ttft = [(t["event_ns"][0] - t["recv_ns"]) / 1e6 for t in truth.values() if t["event_ns"]]
    itl = [
        (w[i] - w[i - 1]) / 1e6 / t["event_tokens"][i]
        for t in truth.values()
        for w in [t["event_ns"]]
        for i in range(1, len(w))
    ]
    return {
        "true_ttft_p50_ms": pct(ttft, 50),
        "true_ttft_p99_ms": pct(ttft, 99),
        "true_itl_p50_ms": pct(itl, 50),
    }


# ---------------------------------------------------------------------------------------------
# orchestration


@dataclass(slots=True)
class RunConfig:
    reps: int = 3
    guidellm_reps: int = 1  # each GuideLLM benchmark spends ~30 s starting workers on one core
    guidellm_max_seconds: float = 10.0  # it runs ~100 req/s here, so 2000 requests take 20 s
    max_requests: int = 2000
    max_seconds: float = 20.0
    guidellm: str | None = None  # path to the guidellm executable
    tokenizer: str | None = None  # local tokenizer directory for guidellm
    only: tuple[str, ...] = ()
    kinds: tuple[str, ...] = ()
    before_src: str | None = None  # src/ of the older tree for kinds ending in BEFORE
    results: dict[str, Any] = field(default_factory=dict)


class ServerProcess:
    """stream_server.py pinned to the server core; stopped by its own PID."""

    def __init__(self, scenario: Scenario) -> None:
        cmd = [
            "taskset", "-c", SERVER_CORE, sys.executable, str(SERVER),
            "--ttft-ms", str(scenario.ttft_ms), "--itl-ms", str(scenario.itl_ms),
            "--tokens", str(scenario.tokens),
            "--tokens-per-event", str(scenario.tokens_per_event),
        ]  # fmt: skip
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        self.url = f"http://127.0.0.1:{int(self.proc.stdout.readline())}"

    def truth(self) -> dict[str, dict[str, Any]]:
        with urllib.request.urlopen(f"{self.url}/_truth", timeout=30) as response:
            records = json.loads(response.read())
        # requests without a key (GuideLLM cannot tag them) are kept under their position
        keyed = {r["key"] or f"untagged-{i}": r for i, r in enumerate(records)}
        return {k: r for k, r in keyed.items() if not k.startswith("warm-")}

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def loadavg() -> float:
    """1-minute load average: the machine is shared, so say how busy it was."""
    return float(Path("/proc/loadavg").read_text().split()[0])


def child_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_load(cfg: RunConfig, scenario: Scenario, kind: str, url: str, tag: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "load.json"
        cmd = [
            "taskset", "-c", BOTH_CORES if kind in WORKERS else CLIENT_CORE,
            sys.executable, str(Path(__file__).resolve()), "load",
            "--kind", kind.removesuffix(UVLOOP).removesuffix(BEFORE), "--url", url,
            "--concurrency", str(scenario.concurrency),
            "--tokens", str(scenario.tokens), "--max-requests", str(cfg.max_requests),
            "--max-seconds", str(scenario.max_seconds or cfg.max_seconds),
            "--tag", tag, "--out", str(out), "--workers", str(WORKERS.get(kind, 1)),
        ]  # fmt: skip
        if scenario.logprobs:
            cmd.append("--logprobs")
        if kind.endswith(UVLOOP):
            cmd += ["--loop", "uvloop"]
        env = None
        # KIND@before: the same client from an older tree (an A/B in one run)
        if kind.removesuffix(UVLOOP).endswith(BEFORE):
            assert cfg.before_src, f"{kind} needs --before-src"
            env = {**os.environ, "PYTHONPATH": cfg.before_src}
        subprocess.run(cmd, check=True, timeout=cfg.max_seconds + 120, env=env)
        return json.loads(out.read_text())


def run_guidellm(cfg: RunConfig, scenario: Scenario, url: str) -> dict[str, Any]:
    assert cfg.guidellm is not None
    assert cfg.tokenizer is not None
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "guidellm.json"
        cmd = [
            "taskset", "-c", CLIENT_CORE, cfg.guidellm, "run",
            "--backend", f"kind=openai_http,target={url},model=bench",
            "--tokenizer", f"kind=huggingface_auto,model={cfg.tokenizer}",
            "--data", f"kind=synthetic_text,prompt_tokens=8,output_tokens={scenario.tokens}",
            "--profile", f"kind=concurrent,streams={scenario.concurrency}",
            "--constraint", f"kind=max_requests,count={cfg.max_requests}",
            "--constraint", f"kind=max_duration,seconds={cfg.guidellm_max_seconds:g}",
            "--output", f"kind=json,path={out}", "--disable-console",
        ]  # fmt: skip
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
        cpu0 = child_cpu_s()
        # its own session, so a hung run is stopped with every worker process it started
        proc = subprocess.Popen(
            cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            start_new_session=True,
        )  # fmt: skip
        try:
            output, _ = proc.communicate(timeout=cfg.guidellm_max_seconds + 150)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            return {"failed_to_run": "no result after its bound plus 150 s; process group killed"}
        cpu_s = child_cpu_s() - cpu0
        if proc.returncode != 0 or not out.exists():
            return {"failed_to_run": f"exit {proc.returncode}: {output[-600:]}"}
        return judge_guidellm(out, cpu_s)


def median_of(reps: list[dict[str, Any]]) -> dict[str, Any]:
    """Median of each numeric metric over repetitions; other fields from the first."""
    merged: dict[str, Any] = {}
    for key, first in reps[0].items():
        values = [r.get(key) for r in reps]
        numeric = [v for v in values if isinstance(v, int | float) and not isinstance(v, bool)]
        merged[key] = statistics.median(numeric) if len(numeric) == len(values) else first
    merged["reps"] = len(reps)
    return merged


def run_all(cfg: RunConfig) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for scenario in SCENARIOS:
        if cfg.only and scenario.name not in cfg.only:
            continue
        kinds = list(cfg.kinds) if cfg.kinds else list(scenario.kinds)
        if "guidellm" in kinds and not (cfg.guidellm and cfg.tokenizer):
            kinds.remove("guidellm")
        server = ServerProcess(scenario)
        per_kind: dict[str, list[dict[str, Any]]] = {k: [] for k in kinds}
        truths: list[dict[str, float | None]] = []
        try:
            for rep in range(cfg.reps):
                for kind in kinds:  # interleaved so drift hits every client alike
                    if kind == "guidellm" and rep >= cfg.guidellm_reps:
                        continue
                    tag = f"{scenario.name}-{kind}-{rep}"
                    load_before = loadavg()
                    print(
                        f"[{time.strftime('%H:%M:%S')}] {tag} loadavg {load_before}",
                        file=sys.stderr,
                        flush=True,
                    )
                    if kind == "guidellm":
                        metrics = run_guidellm(cfg, scenario, server.url)
                        truth = server.truth()
                        metrics.update(true_latency(truth))
                    else:
                        result = run_load(cfg, scenario, kind, server.url, tag)
                        truth = server.truth()
                        metrics = judge(result, truth)
                        truths.append(true_latency(truth))
                    metrics["loadavg_1m"] = max(load_before, loadavg())
                    per_kind[kind].append(metrics)
        finally:
            server.stop()
        # each repetition's clients ran back to back: their ratio in one repetition is the
        # reading that drift between repetitions does not move
        counting = per_kind.get("raw-count", [])
        per_rep = {
            kind: [
                round(m["rps"] / c["rps"], 3)
                for m, c in zip(reps, counting, strict=False)
                if m.get("rps") and c.get("rps")
            ]
            for kind, reps in per_kind.items()
        }
        results[scenario.name] = {
            "per_rep_x_raw_count_rps": per_rep if counting else {},
            "reps": per_kind,  # every repetition's numbers, in the order they ran
            "scenario": asdict(scenario),
            "clients": {
                k: (median_of(v) if all("failed_to_run" not in r for r in v) else v[0])
                for k, v in per_kind.items()
            },
            "truth": median_of(truths) if truths else {},
        }
    return results


def fmt(value: Any, digits: int = 2) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return str(value)


def markdown(results: dict[str, Any]) -> str:
    """The tables of RESULTS.md."""
    lines = [
        "### Capacity: ITL = 0, TTFT = 0, 64 tokens per request, 1 token per event",
        "",
        "| concurrency | client | req/s | output tok/s | % of raw req/s | "
        "client CPU s / 1000 req | req per client CPU-s | % of raw per CPU-s | "
        "× raw-count req/s | × raw-count per CPU-s | failed | load avg |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]

    def ratio(m: dict[str, Any], ref: dict[str, Any], key: str, *, inverse: bool = False) -> str:
        if not ref.get(key) or not m.get(key):
            return "–"
        return f"{(ref[key] / m[key] if inverse else m[key] / ref[key]):.2f}"

    for name, res in results.items():
        if not name.startswith("capacity"):
            continue
        clients = res["clients"]
        raw = clients.get("raw", {})
        counting = clients.get("raw-count", {})
        for kind, m in clients.items():
            if "failed_to_run" in m:
                lines.append(f"| {res['scenario']['concurrency']} | {kind} | did not run |||||||")
                continue
            share = f"{100 * m['rps'] / raw['rps']:.0f} %" if raw.get("rps") else "–"
            per_cpu = 1000 / m["cpu_s_per_1000"] if m.get("cpu_s_per_1000") else None
            cpu_share = (
                f"{100 * raw['cpu_s_per_1000'] / m['cpu_s_per_1000']:.0f} %"
                if raw.get("cpu_s_per_1000") and m.get("cpu_s_per_1000")
                else "–"
            )
            lines.append(
                f"| {res['scenario']['concurrency']} | {kind} | {fmt(m['rps'], 0)} | "
                f"{fmt(m['tokens_per_s'], 0)} | {share} | {fmt(m['cpu_s_per_1000'])} | "
                f"{fmt(per_cpu, 0)} | {cpu_share} | {ratio(m, counting, 'rps')} | "
                f"{ratio(m, counting, 'cpu_s_per_1000', inverse=True)} | {fmt(m['failed'])} | "
                f"{fmt(m['loadavg_1m'], 1)} |"
            )
    for name, res in results.items():
        per_rep = res.get("per_rep_x_raw_count_rps") or {}
        if name.startswith("capacity") and per_rep:
            lines.append("")
            lines.append(
                f"{name}, × raw-count req/s in each repetition: "
                + "; ".join(f"{k} {', '.join(f'{r:.2f}' for r in v)}" for k, v in per_rep.items())
            )
    for name, title in (
        ("accuracy-c256", "Accuracy: 256 streams, TTFT = 50 ms, ITL = 5 ms, 64 tokens, role chunk"),
        ("accuracy-c64", "Accuracy: 64 streams, TTFT = 50 ms, ITL = 5 ms, 64 tokens, role chunk"),
        ("packed4-c16", "Probes: 16 streams, TTFT = 50 ms, 4 tokens per event (ITL 5 ms/token)"),
    ):
        if name not in results:
            continue
        res = results[name]
        lines += [
            "",
            f"### {title}",
            "",
            "| client | req/s | TTFT err p50 / p99 (ms) | arrival lag p50 / p99 (ms) | "
            "ITL/chunk err p50 / p99 (ms) | ITL/token reported p50 (true) | "
            "ITL/token err p50, abs p99 (ms) | token counts wrong | TTFT on role chunk | "
            "load avg |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for kind, m in res["clients"].items():
            if "failed_to_run" in m:
                continue
            if kind == "guidellm":
                lines.append(
                    f"| guidellm (own report; true TTFT p50/p99 "
                    f"{fmt(m['true_ttft_p50_ms'])}/{fmt(m['true_ttft_p99_ms'])}) | "
                    f"{fmt(m['rps'], 0)} | reports TTFT {fmt(m['reported_ttft_p50_ms'])} / "
                    f"{fmt(m['reported_ttft_p99_ms'])} | – | – | "
                    f"reports ITL {fmt(m['reported_itl_p50_ms'])} (true "
                    f"{fmt(m['true_itl_p50_ms'])}) | – | – | – | {fmt(m['loadavg_1m'], 1)} |"
                )
                continue
            lines.append(
                f"| {kind} | {fmt(m['rps'], 0)} | {fmt(m['ttft_err_p50_ms'])} / "
                f"{fmt(m['ttft_err_p99_ms'])} | {fmt(m['arrival_lag_p50_ms'])} / "
                f"{fmt(m['arrival_lag_p99_ms'])} | {fmt(m['itl_err_p50_ms'], 3)} / "
                f"{fmt(m['itl_err_p99_ms'], 3)} | {fmt(m['itl_tok_reported_p50_ms'], 3)} "
                f"({fmt(m['itl_tok_true_p50_ms'], 3)}) | {fmt(m['itl_tok_err_p50_ms'], 3)}, "
                f"{fmt(m['itl_tok_abs_err_p99_ms'], 3)} | {fmt(m['token_count_wrong'])} | "
                f"{fmt(m['ttft_before_first_token'])} | {fmt(m['loadavg_1m'], 1)} |"
            )
    return "\n".join(lines) + "\n"


def machine() -> dict[str, Any]:
    model = "unknown"
    with open("/proc/cpuinfo") as cpuinfo:
        for line in cpuinfo:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return {
        "nproc": os.cpu_count(),
        "cpu_model": model,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
    }


def run_main(args: argparse.Namespace) -> None:
    guidellm = args.guidellm or shutil.which("guidellm")
    cfg = RunConfig(
        reps=args.reps,
        guidellm_reps=args.guidellm_reps,
        max_requests=args.max_requests,
        max_seconds=args.max_seconds,
        guidellm=guidellm,
        tokenizer=args.tokenizer,
        only=tuple(args.only or ()),
        kinds=tuple(args.kinds or ()),
        before_src=args.before_src,
    )
    started = time.perf_counter()
    results = run_all(cfg)
    report = {
        "machine": machine(),
        "command": " ".join(sys.argv),
        "elapsed_s": time.perf_counter() - started,
        "results": results,
    }
    table = markdown(results)
    print(table)
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1) + "\n")
        Path(args.out).with_suffix(".md").write_text(table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="all scenarios, all clients, medians of repetitions")
    run.add_argument("--reps", type=int, default=3)
    run.add_argument("--guidellm-reps", type=int, default=1)
    run.add_argument("--max-requests", type=int, default=2000)
    run.add_argument("--max-seconds", type=float, default=20.0)
    run.add_argument("--guidellm", help="guidellm executable (its own venv)")
    run.add_argument("--tokenizer", help="local tokenizer directory for guidellm")
    run.add_argument("--only", nargs="*", help="scenario names")
    run.add_argument(
        "--kinds",
        nargs="*",
        help="client kinds (KIND@before: from --before-src; KIND+uvloop: on uvloop's loop)",
    )
    run.add_argument("--before-src", help="src/ of an older tree, for KIND@before")
    run.add_argument("--out", help="JSON report path (tables go next to it as .md)")
    load = sub.add_parser("load", help="one client load; normally started by `run`")
    load.add_argument("--kind", choices=sorted([*CLIENTS, *BENCH_KINDS]), required=True)
    load.add_argument("--url", required=True)
    load.add_argument("--concurrency", type=int, required=True)
    load.add_argument("--tokens", type=int, default=64)
    load.add_argument("--logprobs", action="store_true")
    load.add_argument("--max-requests", type=int, default=2000)
    load.add_argument("--max-seconds", type=float, default=20.0)
    load.add_argument("--tag", default="r")
    load.add_argument("--out", required=True)
    load.add_argument("--cprofile", help="write cProfile stats of the load here")
    load.add_argument("--workers", type=int, default=1, help="servegate-bench: processes")
    load.add_argument("--pyinstrument", help="write a pyinstrument text profile here")
    load.add_argument("--loop", choices=["asyncio", "uvloop"], default="asyncio")
    cost = sub.add_parser("parse-cost", help="per-event CPU of each intake stage, in process")
    cost.add_argument("--number", type=int, default=300)
    args = parser.parse_args()
    if args.command == "run":
        run_main(args)
    elif args.command == "parse-cost":
        parse_cost_main(args)
    else:
        load_main(args)


if __name__ == "__main__":
    main()
