"""The proxy's memory under slow large uploads: N clients each send a SIZE_MIB request body at
RATE_MIB_S through `servegate proxy` (its own process, shadow mode, mirror off) to a small
upstream that answers every request; the proxy's RSS is sampled from /proc every 50 ms.

  python benchmarks/proxy_uploads.py --clients 64 --size-mib 15 --rate-mib-s 2 [-- PROXY ARGS]

Prints one JSON line: the proxy's RSS at start and its peak, the answers by status, seconds.
`PYTHONPATH=OTHER/src python benchmarks/proxy_uploads.py …` measures another tree's proxy.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

CHUNK = 256 * 1024


class Answer(BaseHTTPRequestHandler):
    """Reads the body in pieces (never whole) and answers a small OpenAI-shaped JSON."""

    def do_POST(self) -> None:
        left = int(self.headers.get("content-length", "0"))
        while left:
            left -= len(self.rfile.read(min(left, CHUNK)))
        body = b'{"choices":[{"index":0,"message":{"role":"assistant","content":"ok"},' \
               b'"finish_reason":"stop"}]}'  # fmt: skip
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def upload(port: int, size: int, rate: float, out: list[int]) -> None:
    payload = b"x" * CHUNK
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: p\r\nContent-Type: application/json\r\n"
        f"Content-Length: {size}\r\nConnection: close\r\n\r\n"
    ).encode()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=120) as sock:
            sock.sendall(head)
            sent, began = 0, time.monotonic()
            while sent < size:
                piece = payload[: min(CHUNK, size - sent)]
                try:
                    sock.sendall(piece)
                except OSError:
                    break  # the proxy answered early (503, 408) and closed
                sent += len(piece)
                ahead = sent / rate - (time.monotonic() - began)
                if ahead > 0:
                    time.sleep(ahead)
            answer = sock.recv(64)
        out.append(int(answer.split(b" ", 2)[1]) if answer else 0)
    except (OSError, ValueError, IndexError):
        out.append(0)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--size-mib", type=float, default=15)
    parser.add_argument("--rate-mib-s", type=float, default=2)
    parser.add_argument("proxy_args", nargs="*")
    args = parser.parse_args()
    upstream = ThreadingHTTPServer(("127.0.0.1", 0), Answer)
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    db = os.path.join(tempfile.mkdtemp(), "p.db")
    proxy = subprocess.Popen(
        [sys.executable, "-m", "servegate", "proxy", "--sample", "0", "--db", db,
         "--primary", f"http://127.0.0.1:{upstream.server_address[1]}/v1",
         "--candidate", "http://127.0.0.1:10/v1", "--listen", "127.0.0.1:0", *args.proxy_args],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proxy.stdout is not None
    line = proxy.stdout.readline()
    port = int(line.split("listening on http://127.0.0.1:", 1)[1].split("/", 1)[0])
    start_rss = peak = rss_mib(proxy.pid)
    statuses: list[int] = []
    size, rate = int(args.size_mib * 2**20), args.rate_mib_s * 2**20
    began = time.monotonic()
    clients = [
        threading.Thread(target=upload, args=(port, size, rate, statuses))
        for _ in range(args.clients)
    ]
    for c in clients:
        c.start()
    while any(c.is_alive() for c in clients):
        peak = max(peak, rss_mib(proxy.pid))
        time.sleep(0.05)
    took = time.monotonic() - began
    proxy.terminate()
    proxy.communicate(timeout=15)
    upstream.shutdown()
    print(json.dumps({
        "clients": args.clients, "size_mib": args.size_mib, "rate_mib_s": args.rate_mib_s,
        "proxy_args": args.proxy_args, "rss_start_mib": round(start_rss, 1),
        "rss_peak_mib": round(peak, 1), "statuses": dict(Counter(statuses)),
        "seconds": round(took, 1),
    }))  # fmt: skip


if __name__ == "__main__":
    main()
