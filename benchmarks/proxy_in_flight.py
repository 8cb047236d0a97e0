"""The proxy's memory with many requests in flight: N clients each send a SIZE_MIB request body
at once through `servegate proxy` (its own process, shadow mode, mirror off) to a slow primary
that reads every body and holds its answer HOLD_S seconds. A client answered 503 waits its
Retry-After and sends again, until it gets its answer or DEADLINE_S passes. The proxy's RSS is
sampled from /proc every 50 ms (and its VmHWM read at the end).

  python benchmarks/proxy_in_flight.py --clients 1000 --size-mib 1 --hold-s 10 [-- PROXY ARGS]

Prints one JSON line: the proxy's RSS at start and its peak, the most requests it held at once
(healthz `in_flight`, sampled), final answers by status, 503s and their reasons, seconds.
`PYTHONPATH=OTHER/src python benchmarks/proxy_in_flight.py …` measures another tree's proxy.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter

from aiohttp import web

ANSWER = b'{"choices":[{"index":0,"message":{"role":"assistant","content":"ok"},' \
         b'"finish_reason":"stop"}]}'  # fmt: skip


def status_kib(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


async def slow_primary(hold_s: float) -> tuple[web.AppRunner, int]:
    async def chat(request: web.Request) -> web.Response:
        await request.read()
        await asyncio.sleep(hold_s)
        return web.Response(body=ANSWER, content_type="application/json")

    app = web.Application(client_max_size=64 * 2**20)
    app.router.add_post("/{tail:.*}", chat)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, backlog=4096)
    await site.start()
    port = runner.addresses[0][1]
    return runner, port


async def client(port: int, body: bytes, deadline: float, out: Counter[str]) -> None:
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: p\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode()
    while time.monotonic() < deadline:
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=2**20)
            writer.write(head + body)
            await writer.drain()
            answer = await asyncio.wait_for(reader.read(), max(1.0, deadline - time.monotonic()))
            writer.close()
        except (OSError, TimeoutError):
            out["connection_error"] += 1
            await asyncio.sleep(1)
            continue
        code = int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/") else 0
        if code == 503:
            reason = re.search(rb'"type": "(\w+)"', answer)
            out[f"503:{(reason[1] if reason else b'?').decode()}"] += 1
            retry = re.search(rb"(?i)retry-after: (\d+)", answer)
            await asyncio.sleep(int(retry[1]) if retry else 1)
            continue
        out[f"final:{code}"] += 1
        return
    out["final:gave_up"] += 1


async def run(args: argparse.Namespace) -> dict[str, object]:
    runner, primary_port = await slow_primary(args.hold_s)
    db = os.path.join(tempfile.mkdtemp(), "p.db")
    proxy = subprocess.Popen(  # noqa: ASYNC220 (started once, before any client)
        [sys.executable, "-m", "servegate", "proxy", "--sample", "0", "--db", db,
         "--primary", f"http://127.0.0.1:{primary_port}/v1",
         "--candidate", "http://127.0.0.1:10/v1", "--listen", "127.0.0.1:0", *args.proxy_args],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proxy.stdout is not None
    line = await asyncio.to_thread(proxy.stdout.readline)
    port = int(line.split("listening on http://127.0.0.1:", 1)[1].split("/", 1)[0])
    start_rss = peak = status_kib(proxy.pid, "VmRSS") / 1024
    body = json.dumps({"messages": [{"role": "user", "content": "x" * int(args.size_mib * 2**20)}]})
    counts: Counter[str] = Counter()
    began = time.monotonic()
    deadline = began + args.deadline_s
    tasks = [asyncio.create_task(client(port, body.encode(), deadline, counts))
             for _ in range(args.clients)]  # fmt: skip
    most_in_flight = 0

    def in_flight() -> int:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/servegate/healthz", timeout=5) as r:
            return int(json.loads(r.read())["in_flight"])

    while not all(t.done() for t in tasks):
        peak = max(peak, status_kib(proxy.pid, "VmRSS") / 1024)
        with contextlib.suppress(OSError):
            most_in_flight = max(most_in_flight, await asyncio.to_thread(in_flight))
        await asyncio.sleep(0.05)
    took = time.monotonic() - began
    hwm = status_kib(proxy.pid, "VmHWM") / 1024
    proxy.terminate()
    await asyncio.to_thread(proxy.communicate, timeout=15)
    await runner.cleanup()
    return {
        "clients": args.clients, "size_mib": args.size_mib, "hold_s": args.hold_s,
        "proxy_args": args.proxy_args, "rss_start_mib": round(start_rss, 1),
        "rss_peak_mib": round(max(peak, hwm), 1), "most_in_flight": most_in_flight,
        "answers": dict(sorted(counts.items())), "seconds": round(took, 1),
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--clients", type=int, default=1000)
    parser.add_argument("--size-mib", type=float, default=1)
    parser.add_argument("--hold-s", type=float, default=10)
    parser.add_argument("--deadline-s", type=float, default=180)
    parser.add_argument("proxy_args", nargs="*")
    args = parser.parse_args()
    print(json.dumps(asyncio.run(run(args))))


if __name__ == "__main__":
    main()
