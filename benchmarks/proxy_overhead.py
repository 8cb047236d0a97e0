"""What `servegate proxy` adds to the user's latency, and what a mirror backlog costs it.

A closed-loop streaming load (CONCURRENCY streams, each a chat completion of TOKENS tokens from
benchmarks/stream_server.py) is sent directly to the upstream and through the proxy, with the
mirror off (--sample 0) and on for every request (--sample 1) against a healthy, a slow and a
hung candidate. Configurations are interleaved round by round so the machine's load falls on
all of them alike.

Added latency is measured against the upstream's own clock: stream_server records when it wrote
each event (perf_counter_ns, CLOCK_MONOTONIC, shared by every process), the client when it read
it, so per request `delivery = client read − server write` for the first token (TTFT) and the
last one (E2EL). Through the proxy, delivery includes the proxy's hop; the added latency at a
quantile is delivery(proxy) − delivery(direct) at that quantile. The TTFT/E2EL themselves are
reported too. Peak RSS of the proxy is its VmHWM at the end of each run.

Run: python benchmarks/proxy_overhead.py --out benchmarks/results/proxy_overhead.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np

HERE = Path(__file__).resolve().parent
TOKEN = b'"content":" tok"'


def spawn_stream_server(*args: str) -> tuple[subprocess.Popen[str], int]:
    proc = subprocess.Popen(
        [sys.executable, str(HERE / "stream_server.py"), *args], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    return proc, int(proc.stdout.readline())


def spawn_holder() -> tuple[subprocess.Popen[str], int]:
    """A hung engine: accepts connections, reads requests, never answers (no headers ever)."""
    proc = subprocess.Popen([sys.executable, __file__, "--hold"], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    return proc, int(proc.stdout.readline())


async def hold() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while await reader.read(65536):
            pass
        writer.close()

    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    print(server.sockets[0].getsockname()[1], flush=True)
    await server.serve_forever()


def spawn_proxy(primary: int, candidate: int, sample: float, db: Path) -> tuple[Any, int]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "servegate", "proxy",
         "--primary", f"http://127.0.0.1:{primary}/v1",
         "--candidate", f"http://127.0.0.1:{candidate}/v1",
         "--sample", str(sample), "--listen", "127.0.0.1:0", "--db", str(db),
         "--candidate-timeout-s", "30"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if "listening on" not in line:
        raise RuntimeError(f"proxy did not start: {line!r}")
    return proc, int(line.split("127.0.0.1:", 1)[1].split("/", 1)[0])


def vm_hwm_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return -1


async def one(session: aiohttp.ClientSession, url: str, tokens: int, pad: str) -> dict[str, Any]:
    key = uuid.uuid4().hex
    body = {"model": "m", "stream": True, "max_tokens": tokens, "user": key,
            "messages": [{"role": "user", "content": "hi" + pad}]}  # fmt: skip
    sent = time.perf_counter_ns()
    first = last = None
    buf = b""
    try:
        async with session.post(url, json=body) as response:
            status = response.status
            async for data in response.content.iter_any():
                now = time.perf_counter_ns()
                buf += data
                if TOKEN in data:
                    if first is None:
                        first = now
                    last = now
    except aiohttp.ClientError as exc:
        return {"key": key, "ok": False, "error": repr(exc)}
    ok = status == 200 and buf.rstrip().endswith(b"data: [DONE]") and first is not None
    return {"key": key, "ok": ok, "status": status, "sent": sent, "first": first, "last": last}


async def load(url: str, concurrency: int, seconds: float, tokens: int, pad: str) -> list[Any]:
    results: list[dict[str, Any]] = []
    end = time.monotonic() + seconds
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def worker() -> None:
            while time.monotonic() < end:
                results.append(await one(session, url, tokens, pad))

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return results


async def truth(port: int) -> dict[str, Any]:
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://127.0.0.1:{port}/_truth") as response,
    ):
        records = json.loads(await response.read())
    return {r["key"]: r for r in records}


def summarise(results: list[dict[str, Any]], truths: dict[str, Any]) -> dict[str, Any]:
    ok = [r for r in results if r["ok"]]
    ttft = [(r["first"] - r["sent"]) / 1e6 for r in ok]
    e2el = [(r["last"] - r["sent"]) / 1e6 for r in ok]
    d_first, d_last = [], []
    for r in ok:
        t = truths.get(r["key"])
        if t and t["event_ns"]:
            d_first.append((r["first"] - t["event_ns"][0]) / 1e6)
            d_last.append((r["last"] - t["event_ns"][-1]) / 1e6)

    def q(values: list[float]) -> dict[str, float | None]:
        if not values:
            return {"p50": None, "p99": None}
        return {"p50": float(np.percentile(values, 50)), "p99": float(np.percentile(values, 99))}

    return {
        "requests": len(results),
        "errors": len(results) - len(ok),
        "ttft_ms": q(ttft),
        "e2el_ms": q(e2el),
        "delivery_first_ms": q(d_first),
        "delivery_last_ms": q(d_last),
        "_delivery_first": d_first,
        "_delivery_last": d_last,
    }


CONFIGS = (
    "direct",
    "proxy-mirror-off",
    "proxy-healthy-5pct",
    "proxy-healthy",
    "proxy-slow",
    "proxy-hung",
)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    primary, primary_port = spawn_stream_server(
        "--ttft-ms", str(args.ttft_ms), "--itl-ms", str(args.itl_ms), "--tokens", str(args.tokens)
    )
    healthy, healthy_port = spawn_stream_server(
        "--ttft-ms", str(args.ttft_ms), "--itl-ms", str(args.itl_ms), "--tokens", str(args.tokens)
    )
    slow, slow_port = spawn_stream_server("--ttft-ms", "1500", "--itl-ms", "50")
    holder, hold_port = spawn_holder()
    candidates = {"proxy-mirror-off": (healthy_port, 0.0), "proxy-healthy": (healthy_port, 1.0),
                  "proxy-healthy-5pct": (healthy_port, 0.05),
                  "proxy-slow": (slow_port, 1.0), "proxy-hung": (hold_port, 1.0)}  # fmt: skip
    collected: dict[str, dict[str, list[Any]]] = {c: {"results": [], "load": []} for c in CONFIGS}
    peak_rss: dict[str, list[int]] = {c: [] for c in CONFIGS if c != "direct"}
    truths: dict[str, Any] = {}
    folder = Path(tempfile.mkdtemp(prefix="proxy-bench-"))
    try:
        for rnd in range(args.rounds):
            for config in args.configs:
                proxy = None
                if config == "direct":
                    url = f"http://127.0.0.1:{primary_port}/v1/chat/completions"
                else:
                    port, sample = candidates[config]
                    proxy, pport = spawn_proxy(
                        primary_port, port, sample, folder / f"{config}-{rnd}.db"
                    )
                    url = f"http://127.0.0.1:{pport}/v1/chat/completions"
                    await load(url, 2, 1.0, args.tokens, "")  # warm-up, not counted
                await truth(primary_port)  # forget the warm-up's records
                load_before = os.getloadavg()[0]
                results = await load(url, args.concurrency, args.seconds, args.tokens, args.pad)
                truths.update(await truth(primary_port))
                collected[config]["results"].extend(results)
                collected[config]["load"].append(load_before)
                if proxy is not None:
                    peak_rss[config].append(vm_hwm_kib(proxy.pid))
                    proxy.terminate()
                    proxy.wait(timeout=30)
                print(f"round {rnd} {config}: {len(results)} requests, load {load_before:.1f}",
                      file=sys.stderr, flush=True)  # fmt: skip
    finally:
        for proc in (primary, healthy, slow, holder):
            proc.terminate()
            proc.wait(timeout=10)
    out: dict[str, Any] = {"settings": dict(vars(args)), "configs": {}}
    direct = summarise(collected["direct"]["results"], truths)
    for config in args.configs:
        s = summarise(collected[config]["results"], truths)
        added = {}
        for name, key in (("ttft", "_delivery_first"), ("e2el", "_delivery_last")):
            for qname, qv in (("p50", 50), ("p99", 99)):
                if s[key] and direct[key]:
                    added[f"{name}_{qname}_ms"] = float(
                        np.percentile(s[key], qv) - np.percentile(direct[key], qv)
                    )
        s = {k: v for k, v in s.items() if not k.startswith("_")}
        s["added_ms"] = added
        s["load_avg_1m"] = collected[config]["load"]
        s["peak_rss_mib"] = [round(k / 1024, 1) for k in peak_rss.get(config, [])]
        out["configs"][config] = s
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hold", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--ttft-ms", type=float, default=20.0)
    parser.add_argument("--itl-ms", type=float, default=5.0)
    parser.add_argument("--pad-bytes", type=int, default=0, help="padding in each prompt")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--configs", nargs="+", choices=CONFIGS, default=list(CONFIGS))
    args = parser.parse_args()
    if args.hold:
        asyncio.run(hold())
        return
    args.pad = "x" * args.pad_bytes
    result = asyncio.run(run(args))
    result["settings"].pop("pad", None)
    result["settings"].pop("out", None)
    text = json.dumps(result, indent=2)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
