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
reported too. Peak RSS of the proxy is its VmHWM at the end of each run; `--rss-every-s N`
also samples its RSS every N seconds during the load (the curve of a backlog).

`--proxy-src NAME=DIR` (repeatable) runs every proxy configuration once per source tree (the
proxy process gets PYTHONPATH=DIR), interleaved in each round, so that two versions of the proxy
are compared in the same minutes of a shared machine; `git archive REV src | tar -x -C DIR/..`
makes such a tree. `--profile DIR` runs each proxy under cProfile (its event-loop thread) and
writes one .prof per run.

Run: python benchmarks/proxy_overhead.py --out benchmarks/results/proxy_overhead.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
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


def spawn_proxy(
    primary: int,
    candidate: int,
    sample: float,
    db: Path,
    src: Path | None = None,
    profile: Path | None = None,
) -> tuple[Any, int]:
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = str(src)
    runner = ["-m", "cProfile", "-o", str(profile)] if profile is not None else []
    proc = subprocess.Popen(
        [sys.executable, *runner, "-m", "servegate", "proxy",
         "--primary", f"http://127.0.0.1:{primary}/v1",
         "--candidate", f"http://127.0.0.1:{candidate}/v1",
         "--sample", str(sample), "--listen", "127.0.0.1:0", "--db", str(db),
         "--candidate-timeout-s", "30"],
        stdout=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if "listening on" not in line:
        raise RuntimeError(f"proxy did not start: {line!r}")
    return proc, int(line.split("127.0.0.1:", 1)[1].split("/", 1)[0])


def vm_hwm_kib(pid: int, field: str = "VmHWM") -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return -1


async def sample_rss(pid: int, every_s: float, into: list[tuple[float, float]]) -> None:
    """(seconds since start, RSS MiB) every `every_s` until cancelled."""
    start = time.monotonic()
    while True:
        into.append((round(time.monotonic() - start, 1), round(vm_hwm_kib(pid, "VmRSS") / 1024, 1)))
        await asyncio.sleep(every_s)


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
    trees: dict[str, Path | None] = dict(args.proxy_src) or {"": None}
    labels: list[tuple[str, str, str]] = []  # (label, config, tree)
    for config in args.configs:
        for tree in [""] if config == "direct" else list(trees):
            labels.append((f"{config}@{tree}" if tree else config, config, tree))
    collected: dict[str, dict[str, list[Any]]] = {
        label: {"results": [], "load": []} for label, _, _ in labels
    }
    peak_rss: dict[str, list[int]] = {
        label: [] for label, config, _ in labels if config != "direct"
    }
    rss_curves: dict[str, list[list[tuple[float, float]]]] = {label: [] for label in peak_rss}
    truths: dict[str, Any] = {}
    folder = Path(tempfile.mkdtemp(prefix="proxy-bench-"))
    try:
        for rnd in range(args.rounds):
            for label, config, tree in labels:
                proxy = None
                sampler = None
                if config == "direct":
                    url = f"http://127.0.0.1:{primary_port}/v1/chat/completions"
                else:
                    port, sample = candidates[config]
                    name = label.replace("@", "-")
                    profile = None if args.profile is None else args.profile / f"{name}-{rnd}.prof"
                    proxy, pport = spawn_proxy(
                        primary_port, port, sample, folder / f"{name}-{rnd}.db",
                        trees[tree], profile,
                    )  # fmt: skip
                    url = f"http://127.0.0.1:{pport}/v1/chat/completions"
                    await load(url, 2, 1.0, args.tokens, "")  # warm-up, not counted
                    if args.rss_every_s:
                        curve: list[tuple[float, float]] = []
                        rss_curves[label].append(curve)
                        sampler = asyncio.create_task(
                            sample_rss(proxy.pid, args.rss_every_s, curve)
                        )
                await truth(primary_port)  # forget the warm-up's records
                load_before = os.getloadavg()[0]
                results = await load(url, args.concurrency, args.seconds, args.tokens, args.pad)
                truths.update(await truth(primary_port))
                collected[label]["results"].extend(results)
                collected[label]["load"].append(load_before)
                if sampler is not None:
                    sampler.cancel()
                if proxy is not None:
                    peak_rss[label].append(vm_hwm_kib(proxy.pid))
                    # uvicorn re-raises SIGTERM after its shutdown (no exit handlers run); SIGINT
                    # ends in KeyboardInterrupt, so cProfile writes its file
                    proxy.send_signal(signal.SIGINT if args.profile else signal.SIGTERM)
                    proxy.wait(timeout=60)
                print(f"round {rnd} {label}: {len(results)} requests, load {load_before:.1f}",
                      file=sys.stderr, flush=True)  # fmt: skip
    finally:
        for proc in (primary, healthy, slow, holder):
            proc.terminate()
            proc.wait(timeout=10)
    out: dict[str, Any] = {"settings": dict(vars(args)), "configs": {}}
    direct = summarise(collected.get("direct", {"results": []})["results"], truths)
    for label, _, _ in labels:
        s = summarise(collected[label]["results"], truths)
        added = {}
        for name, key in (("ttft", "_delivery_first"), ("e2el", "_delivery_last")):
            for qname, qv in (("p50", 50), ("p99", 99)):
                if s[key] and direct[key]:
                    added[f"{name}_{qname}_ms"] = float(
                        np.percentile(s[key], qv) - np.percentile(direct[key], qv)
                    )
        s = {k: v for k, v in s.items() if not k.startswith("_")}
        s["added_ms"] = added
        s["load_avg_1m"] = collected[label]["load"]
        s["peak_rss_mib"] = [round(k / 1024, 1) for k in peak_rss.get(label, [])]
        if rss_curves.get(label):
            s["rss_mib_over_time"] = rss_curves[label]
        out["configs"][label] = s
    return out


def markdown(result: dict[str, Any]) -> str:
    """The results as the table of benchmarks/RESULTS.md."""

    def pair(d: dict[str, Any], a: str, b: str) -> str:
        return " / ".join("–" if d.get(k) is None else f"{d[k]:.1f}" for k in (a, b))

    rows = [
        "| configuration | requests | errors | TTFT p50 / p99 ms | E2EL p50 / p99 ms "
        "| added TTFT p50 / p99 ms | added E2EL p50 / p99 ms | proxy peak RSS MiB "
        "| load avg (1 min) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for label, s in result["configs"].items():
        added = s["added_ms"]
        rss = ", ".join(f"{v:.1f}" for v in s["peak_rss_mib"]) or "–"
        load = ", ".join(f"{v:.1f}" for v in s["load_avg_1m"])
        rows.append(
            f"| {label} | {s['requests']} | {s['errors']} | {pair(s['ttft_ms'], 'p50', 'p99')} "
            f"| {pair(s['e2el_ms'], 'p50', 'p99')} "
            f"| {pair(added, 'ttft_p50_ms', 'ttft_p99_ms')} "
            f"| {pair(added, 'e2el_p50_ms', 'e2el_p99_ms')} | {rss} | {load} |"
        )
    return "\n".join(rows) + "\n"


def tree_arg(value: str) -> tuple[str, Path]:
    name, sep, folder = value.partition("=")
    path = Path(folder).resolve()
    if not sep or not name or not (path / "servegate" / "__init__.py").is_file():
        raise argparse.ArgumentTypeError(f"{value!r}: want NAME=DIR with DIR/servegate/")
    return name, path


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
    parser.add_argument("--md", type=Path, default=None, help="write the table here too")
    parser.add_argument("--configs", nargs="+", choices=CONFIGS, default=list(CONFIGS))
    parser.add_argument(
        "--proxy-src",
        type=tree_arg,
        action="append",
        default=[],
        metavar="NAME=DIR",
        help="run each proxy configuration from this src tree too (repeatable)",
    )
    parser.add_argument("--rss-every-s", type=float, default=0.0, help="sample the proxy's RSS")
    parser.add_argument("--profile", type=Path, default=None, help="cProfile each proxy here")
    args = parser.parse_args()
    if args.hold:
        asyncio.run(hold())
        return
    args.pad = "x" * args.pad_bytes
    if args.profile is not None:
        args.profile.mkdir(parents=True, exist_ok=True)
    result = asyncio.run(run(args))
    result["settings"].pop("pad", None)
    result["settings"].pop("out", None)
    result["settings"].pop("md", None)
    result["settings"]["proxy_src"] = {name: str(path) for name, path in args.proxy_src}
    result["settings"]["profile"] = None if args.profile is None else str(args.profile)
    text = json.dumps(result, indent=2)
    if args.out:
        args.out.write_text(text + "\n")
    if args.md:
        args.md.write_text(markdown(result))
    print(text)


if __name__ == "__main__":
    main()
