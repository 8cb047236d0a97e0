"""Measure canary intervals on the reference engine, for the canary judge's tests.

The real proxy routes half of the requests to the candidate (a recording controller), measures
each answer as it does in canary mode, and this script writes the observations of each side to
tests/unit/canary/data/measured_intervals.json:

  python benchmarks/canary_intervals.py --requests 80 [--out PATH]

Candidates: `benign` (the benign config change: same weights, mmap off — an A/A), `slow` (the
clean model behind the `slow` fault, 30 ms before the request and between streamed events).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import socket
import threading
import time
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import uvicorn

from servegate.canary.protocol import RequestObservation, Side
from servegate.engine import BENIGN_VARIANT, FaultOptions, start_engine
from servegate.proxy import ProxySettings, Upstream
from servegate.proxy.app import Proxy

OUT = Path(__file__).resolve().parents[1] / "tests/unit/canary/data/measured_intervals.json"
PROMPTS = [
    "Reply with exactly: OK",
    "What is 2+3? Answer with a number.",
    "Name the capital of France in one word.",
    "Write one short sentence about the sea.",
]
KEPT = ("error", "timeout", "garbage", "empty_output", "ttft_ms", "e2el_ms")


class Recording:
    """Routes u < 0.5 to the candidate and keeps every observation."""

    def __init__(self) -> None:
        self.seen: list[RequestObservation] = []

    def choose(self, u: float) -> Side:
        return "candidate" if u < 0.5 else "primary"

    def observe(self, observation: RequestObservation) -> None:
        self.seen.append(observation)

    async def run(self, stop: asyncio.Event) -> None:
        await stop.wait()

    async def finish(self, reason: str, evidence: Mapping[str, Any]) -> object:
        raise AssertionError("not used")

    def snapshot(self) -> Mapping[str, Any]:
        return {}


@contextmanager
def serving(app: Any) -> Iterator[str]:
    sock = socket.create_server(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()


def measure(primary: str, candidate: str, requests: int) -> dict[str, dict[str, list[float]]]:
    controller = Recording()
    settings = ProxySettings(
        primary=Upstream.parse("primary", primary),
        candidate=Upstream.parse("candidate", candidate),
        mode="canary",
        seed=3,
    )
    with serving(Proxy(settings, controller=controller).app()) as url:
        for i in range(requests):
            messages = [{"role": "user", "content": PROMPTS[i % len(PROMPTS)]}]
            body = {"model": "smollm2", "stream": True, "max_tokens": 24, "temperature": 0,
                    "messages": messages}  # fmt: skip
            request = urllib.request.Request(
                url + "/v1/chat/completions", data=json.dumps(body).encode(),
                headers={"Content-Type": "application/json"},
            )  # fmt: skip
            with urllib.request.urlopen(request, timeout=120) as response:
                response.read()
    out: dict[str, dict[str, list[float]]] = {"primary": {}, "candidate": {}}
    for o in controller.seen:
        for name in KEPT:
            if name in o.metrics:
                out[o.side].setdefault(name, []).append(round(float(o.metrics[name]), 3))
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=80)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    random.seed(0)
    measured: dict[str, Any] = {
        "measured_at": time.strftime("%Y-%m-%dT%H:%MZ", time.gmtime()),
        "command": f"python benchmarks/canary_intervals.py --requests {args.requests}",
        "requests": args.requests,
    }
    with start_engine("clean") as clean:
        with start_engine(BENIGN_VARIANT) as benign:
            measured["benign"] = measure(clean.base_url, benign.base_url, args.requests)
        with start_engine("clean", fault="slow", fault_options=FaultOptions(delay_ms=30)) as slow:
            measured["slow"] = measure(clean.base_url, slow.base_url, args.requests)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(measured, indent=1) + "\n", encoding="utf-8")
    for name in ("benign", "slow"):
        sides = measured[name]
        print(name, {s: len(v.get("e2el_ms", [])) for s, v in sides.items()})


if __name__ == "__main__":
    main()
