"""A lean OpenAI chat-completions SSE server with known timing, logging ground truth per request.

Raw asyncio (no framework) so that one core serves hundreds of streams without becoming the
bottleneck of a client benchmark. Knobs: TTFT, ITL per token, output tokens, tokens per SSE event,
and an empty `role` chunk sent before the first token (the trap where TTFT must not start).

Ground truth: for every request the server keeps `perf_counter_ns` stamps of when the request was
read, and of each event right after its bytes were handed to the kernel (`transport.write` sends at
once while the socket buffer has room; writes that had to be buffered are counted). On Linux
`perf_counter_ns` is CLOCK_MONOTONIC, shared by every process, so client stamps and server stamps
compare directly. `GET /_truth` returns the records kept since the last call and forgets them.

Run: python benchmarks/stream_server.py --ttft-ms 50 --itl-ms 5 --tokens 64   (prints its port)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import time
from dataclasses import dataclass, field
from typing import Any

HEAD_END = b"\r\n\r\n"
SSE_HEADERS = (
    b"HTTP/1.1 200 OK\r\n"
    b"Content-Type: text/event-stream\r\n"
    b"Cache-Control: no-cache\r\n"
    b"Transfer-Encoding: chunked\r\n\r\n"
)
TOKEN_TEXT = " tok"
LOGPROB_ENTRY = json.dumps(
    {"token": TOKEN_TEXT, "logprob": -0.25, "bytes": [32, 116, 111, 107], "top_logprobs": []}
)


@dataclass(frozen=True, slots=True)
class StreamConfig:
    """Timing of every stream this server writes."""

    ttft_ms: float = 0.0
    itl_ms: float = 0.0  # per token; an event carrying k tokens follows the previous by k * itl_ms
    tokens: int = 64  # output tokens when the request gives no max_tokens
    tokens_per_event: int = 1
    role_chunk: bool = True  # send {"role": "assistant", "content": ""} right after the headers


@dataclass(slots=True)
class Truth:
    """When the server did each thing for one request (perf_counter_ns)."""

    key: str | None
    recv_ns: int
    role_ns: int | None = None
    event_ns: list[int] = field(default_factory=list)  # token-carrying events only
    event_tokens: list[int] = field(default_factory=list)
    done_ns: int | None = None
    buffered_writes: int = 0  # writes the kernel did not take at once (stamp is then early)

    def as_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "recv_ns": self.recv_ns,
            "role_ns": self.role_ns,
            "event_ns": self.event_ns,
            "event_tokens": self.event_tokens,
            "done_ns": self.done_ns,
            "buffered_writes": self.buffered_writes,
        }


def chunked(payload: bytes) -> bytes:
    """One HTTP/1.1 chunk."""
    return b"%x\r\n%s\r\n" % (len(payload), payload)


class Wire:
    """Pre-rendered SSE events of one request shape."""

    def __init__(self, *, logprobs: bool, usage: bool) -> None:
        self.logprobs = logprobs
        self.usage = usage
        self._head = (
            '{"id":"chatcmpl-bench","object":"chat.completion.chunk","created":0,"model":"bench",'
        )
        self.role = self._event(
            '"choices":[{"index":0,"delta":{"role":"assistant","content":""},'
            '"logprobs":null,"finish_reason":null}]}'
        )
        self._tokens: dict[int, bytes] = {}

    def _event(self, rest: str) -> bytes:
        return chunked(b"data: " + (self._head + rest).encode() + b"\n\n")

    def tokens(self, count: int) -> bytes:
        """An event carrying `count` tokens (content plus one logprob entry per token)."""
        cached = self._tokens.get(count)
        if cached is None:
            text = json.dumps(TOKEN_TEXT * count)
            lp = '{"content":[' + ",".join([LOGPROB_ENTRY] * count) + "]}"
            cached = self._event(
                f'"choices":[{{"index":0,"delta":{{"content":{text}}},'
                f'"logprobs":{lp if self.logprobs else "null"},"finish_reason":null}}]}}'
            )
            self._tokens[count] = cached
        return cached

    def finish(self, completion_tokens: int) -> bytes:
        out = self._event(
            '"choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"length"}]}'
        )
        if self.usage:
            out += self._event(
                f'"choices":[],"usage":{{"prompt_tokens":8,"completion_tokens":{completion_tokens},'
                f'"total_tokens":{8 + completion_tokens}}}}}'
            )
        return out + chunked(b"data: [DONE]\n\n") + b"0\r\n\r\n"


def event_plan(total: int, per_event: int) -> list[int]:
    """Tokens in each event: `per_event` each, the remainder in the last."""
    plan = [per_event] * (total // per_event)
    if total % per_event:
        plan.append(total % per_event)
    return plan


@dataclass(slots=True)
class Stream:
    """A request between its headers and its last event."""

    conn: Connection
    wire: Wire
    plan: list[int]
    truth: Truth
    first_due: float  # loop time at which the first token may go out
    index: int = 0


class Server:
    """Holds the config, the step clock and the ground truth of every request since `/_truth`.

    Like an engine's decode loop, one step clock serves every stream: each step (ITL times tokens
    per event) writes the next event of every running stream. A stream's first event goes out on
    the first step at least TTFT after its request was read, so true TTFT lies in
    [TTFT, TTFT + one step); the ground-truth log says exactly when.
    """

    def __init__(self, cfg: StreamConfig) -> None:
        self.cfg = cfg
        self.truth: list[Truth] = []
        self.wires = {(lp, us): Wire(logprobs=lp, usage=us) for lp in (0, 1) for us in (0, 1)}
        self.step_s = cfg.itl_ms * cfg.tokens_per_event / 1e3
        self.waiting: list[Stream] = []
        self.running: list[Stream] = []
        self.timer: asyncio.TimerHandle | None = None
        self.next_step = 0.0

    def start(self, stream: Stream) -> None:
        self.waiting.append(stream)
        if self.timer is None:
            loop = asyncio.get_running_loop()
            self.next_step = loop.time() + self.step_s
            self.timer = loop.call_at(self.next_step, self.step)

    def step(self) -> None:
        loop = asyncio.get_running_loop()
        now = loop.time()
        if self.waiting:
            due = [s for s in self.waiting if s.first_due <= now]
            if due:
                self.waiting = [s for s in self.waiting if s.first_due > now]
                self.running.extend(due)
        self.running = [s for s in self.running if s.conn.emit(s)]
        if not (self.waiting or self.running):
            self.timer = None
            return
        # an absolute grid, so one late step does not shift every later one
        self.next_step += self.step_s
        if self.next_step <= now:
            self.next_step += self.step_s * (int((now - self.next_step) / self.step_s) + 1)
        self.timer = loop.call_at(self.next_step, self.step)


class Connection(asyncio.Protocol):
    """One HTTP/1.1 keep-alive connection; requests are answered one at a time."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.loop = asyncio.get_running_loop()
        self.buf = bytearray()
        self.transport: asyncio.Transport | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.busy = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def connection_lost(self, exc: Exception | None) -> None:
        if self.timer is not None:
            self.timer.cancel()
        self.transport = None

    def data_received(self, data: bytes) -> None:
        self.buf += data
        if not self.busy:
            self._next_request()

    def _next_request(self) -> None:
        end = self.buf.find(HEAD_END)
        if end < 0:
            return
        head = bytes(self.buf[:end]).decode("latin-1").split("\r\n")
        length = 0
        for line in head[1:]:
            name, _, value = line.partition(":")
            if name.strip().lower() == "content-length":
                length = int(value)
        if len(self.buf) < end + 4 + length:
            return
        recv_ns = time.perf_counter_ns()
        body = bytes(self.buf[end + 4 : end + 4 + length])
        del self.buf[: end + 4 + length]
        method, path, _ = head[0].split(" ", 2)
        self.busy = True
        if method == "POST" and path.endswith("/chat/completions"):
            self._chat(json.loads(body), recv_ns)
        elif method == "GET" and path.endswith("/models"):
            self._reply({"object": "list", "data": [{"id": "bench", "object": "model"}]})
        elif method == "GET" and path == "/_truth":
            records, self.server.truth = self.server.truth, []
            self._reply([r.as_dict() for r in records])
        elif method == "GET" and path in ("/health", "/v1/health"):
            self._reply({"status": "ok"})
        elif method == "GET" and path == "/metrics":
            self._reply_text(self._metrics())
        else:
            self._reply({"error": {"message": f"no route {method} {path}"}}, status=404)

    def _metrics(self) -> str:
        """Streams past their TTFT and streams still inside it, under vLLM's gauge names."""
        return (
            "# TYPE vllm:num_requests_running gauge\n"
            f'vllm:num_requests_running{{model_name="bench"}} {len(self.server.running)}\n'
            "# TYPE vllm:num_requests_waiting gauge\n"
            f'vllm:num_requests_waiting{{model_name="bench"}} {len(self.server.waiting)}\n'
        )

    def _reply_text(self, text: str) -> None:
        payload = text.encode()
        assert self.transport is not None
        self.transport.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(payload), payload)
        )
        self._idle()

    def _reply(self, obj: Any, status: int = 200) -> None:
        payload = json.dumps(obj).encode()
        reason = b"OK" if status == 200 else b"Not Found"
        assert self.transport is not None
        self.transport.write(
            b"HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
            % (status, reason, len(payload), payload)
        )
        self._idle()

    def _idle(self) -> None:
        self.busy = False
        self.timer = None
        if self.buf and self.transport is not None:
            self._next_request()

    def _chat(self, body: dict[str, Any], recv_ns: int) -> None:
        cfg = self.server.cfg
        tokens = int(body.get("max_tokens") or body.get("max_completion_tokens") or cfg.tokens)
        options = body.get("stream_options") or {}
        shape = (int(bool(body.get("logprobs"))), int(bool(options.get("include_usage"))))
        wire = self.server.wires[shape]
        truth = Truth(key=body.get("user"), recv_ns=recv_ns)
        self.server.truth.append(truth)
        if not body.get("stream"):
            self._reply(self._whole(tokens))
            truth.done_ns = time.perf_counter_ns()
            return
        plan = event_plan(tokens, cfg.tokens_per_event)
        self._write(SSE_HEADERS + (wire.role if cfg.role_chunk else b""), truth)
        if cfg.role_chunk:
            truth.role_ns = time.perf_counter_ns()
        if cfg.itl_ms == 0:
            if cfg.ttft_ms == 0:
                self._burst(wire, plan, truth)
            else:
                due = self.loop.time() + cfg.ttft_ms / 1e3
                self.timer = self.loop.call_at(due, self._burst, wire, plan, truth)
        else:
            first = self.loop.time() + cfg.ttft_ms / 1e3
            self.server.start(Stream(self, wire, plan, truth, first))

    def _burst(self, wire: Wire, plan: list[int], truth: Truth) -> None:
        """ITL 0: every event in one write, as an engine that finished the whole answer at once."""
        self._write(b"".join(wire.tokens(n) for n in plan) + wire.finish(sum(plan)), truth)
        stamp = time.perf_counter_ns()
        truth.event_ns.extend([stamp] * len(plan))
        truth.event_tokens.extend(plan)
        truth.done_ns = stamp
        self._idle()

    def emit(self, stream: Stream) -> bool:
        """Write the stream's next event; False once it has ended (or its client left)."""
        if self.transport is None:
            return False
        count = stream.plan[stream.index]
        self._write(stream.wire.tokens(count), stream.truth)
        stream.truth.event_ns.append(time.perf_counter_ns())
        stream.truth.event_tokens.append(count)
        stream.index += 1
        if stream.index < len(stream.plan):
            return True
        self._write(stream.wire.finish(sum(stream.plan)), stream.truth)
        stream.truth.done_ns = time.perf_counter_ns()
        self._idle()
        return False

    def _write(self, data: bytes, truth: Truth) -> None:
        assert self.transport is not None
        self.transport.write(data)
        if self.transport.get_write_buffer_size():
            truth.buffered_writes += 1

    def _whole(self, tokens: int) -> dict[str, Any]:
        return {
            "id": "chatcmpl-bench",
            "object": "chat.completion",
            "created": 0,
            "model": "bench",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": TOKEN_TEXT * tokens},
                    "finish_reason": "length",
                }
            ],
            "usage": {"prompt_tokens": 8, "completion_tokens": tokens, "total_tokens": 8 + tokens},
        }


async def serve(cfg: StreamConfig, host: str, port: int) -> None:
    """Serve until cancelled; prints the bound port on the first line of stdout."""
    server = Server(cfg)
    loop = asyncio.get_running_loop()
    srv = await loop.create_server(lambda: Connection(server), host, port, backlog=1024)
    print(srv.sockets[0].getsockname()[1], flush=True)
    async with srv:
        await srv.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--ttft-ms", type=float, default=0.0)
    parser.add_argument("--itl-ms", type=float, default=0.0)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--tokens-per-event", type=int, default=1)
    parser.add_argument("--no-role-chunk", action="store_true")
    args = parser.parse_args()
    cfg = StreamConfig(
        ttft_ms=args.ttft_ms,
        itl_ms=args.itl_ms,
        tokens=args.tokens,
        tokens_per_event=args.tokens_per_event,
        role_chunk=not args.no_role_chunk,
    )
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(cfg, args.host, args.port))


if __name__ == "__main__":
    main()
