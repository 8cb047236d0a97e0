"""A stand-in engine for start-up faults no real engine produces on demand.

`python fake_engine.py MODE PORT`:
  serve   print a fallback line, start a worker child in the same process group (its pid is
          printed), then answer GET /v1/models and POST /v1/completions on 127.0.0.1:PORT
  quiet   the same without the fallback line
  silent  print nothing, open no port, run until stopped
  exit    fail at start-up importing a missing optional module
  stubborn  serve, but ignore SIGTERM (only SIGKILL stops it)
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Handler(BaseHTTPRequestHandler):
    def _send(self, payload: object) -> None:
        body = json.dumps(payload).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        if self.path == "/v1/models":
            self._send({"object": "list", "data": [{"id": "fake", "max_model_len": 2048}]})
        else:
            self.send_error(404)

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self._send(
            {
                "choices": [{"index": 0, "text": "!", "finish_reason": "length"}],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
            }
        )

    def log_message(self, *args: object) -> None:
        pass


def main() -> None:
    mode, port = sys.argv[1], int(sys.argv[2])
    if mode == "exit":
        import sg_missing_optional_codec  # noqa: F401

    if mode == "stubborn":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if mode == "silent":
        while True:
            time.sleep(1)
    worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    print(f"worker pid {worker.pid}", flush=True)
    if mode == "serve":
        print("WARNING: kernel unavailable, falling back to the slow path", flush=True)
    time.sleep(0.3)  # load time: the port opens only after this
    ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()


if __name__ == "__main__":
    main()
