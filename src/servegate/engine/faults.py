"""A thin reverse proxy in front of the real llama server that injects one named fault.

Each fault is a factory whose arguments are its config (`hang_long(threshold_chars=2000)`) and
which returns a `Fault`: an async callable that either answers a request itself (the fault) or
returns None to let it through unchanged. Pass-through copies status, headers and body bytes as
they arrive, so SSE streams keep their chunking.

Run as `python -m servegate.engine.faults FAULT --port P --upstream http://127.0.0.1:Q`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from aiohttp import ClientSession, ClientTimeout, web

Fault = Callable[[web.Request, bytes], Awaitable[web.StreamResponse | None]]

# Connection-level headers are per hop (RFC 9110 §7.6.1); the rest pass through untouched.
_HOP_HEADERS = frozenset(
    {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te",
     "trailer", "trailers", "transfer-encoding", "upgrade", "host"}
)  # fmt: skip


@dataclass(frozen=True)
class FaultOptions:
    """Knobs shared by the fault factories; each factory reads the ones it needs."""

    threshold_chars: int = 2000


@dataclass(frozen=True)
class FaultSpec:
    """A registered fault: one-line description and a factory taking FaultOptions."""

    description: str
    build: Callable[[FaultOptions], Fault]


def prompt_chars(payload: object) -> int:
    """Characters of prompt text in a chat or completion request body (token ids count 4 each)."""
    if not isinstance(payload, dict):
        return 0
    total = 0
    for message in payload.get("messages") or []:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            total += len(content)
        elif isinstance(content, list):
            total += sum(len(p.get("text") or "") for p in content if isinstance(p, dict))
    prompt = payload.get("prompt")
    items = prompt if isinstance(prompt, list) else [prompt]
    for item in items:
        if isinstance(item, str):
            total += len(item)
        elif isinstance(item, int):
            total += 4  # ~4 characters per token for English BPE vocabularies
        elif isinstance(item, list):
            total += 4 * len(item)
    return total


async def hold_until_disconnect(request: web.Request) -> web.StreamResponse:
    """Send nothing, not even headers, until the client gives up."""
    # The app runs with handler_cancellation=True, so a client disconnect cancels this wait.
    await asyncio.Event().wait()
    raise AssertionError("unreachable: the wait above ends only by cancellation")


def hang_long(options: FaultOptions) -> Fault:
    """Long prompts never get response headers while everything else works (vLLM #35541)."""

    async def fault(request: web.Request, body: bytes) -> web.StreamResponse | None:
        try:
            payload = json.loads(body) if body else None
        except ValueError:
            return None
        if prompt_chars(payload) <= options.threshold_chars:
            return None
        return await hold_until_disconnect(request)

    return fault


# Explicit registry. Planned next, each a factory of the same shape: slow (added latency per
# token), stream-tool-args (streamed tool-call deltas that do not join into valid JSON),
# reasoning-leak, template-drift (changed prompt_tokens), json-truncated, eos-ignored.
FAULTS: dict[str, FaultSpec] = {
    "hang-long": FaultSpec(
        "prompts over a size threshold never get response headers; /health and short prompts work",
        hang_long,
    ),
}


async def forward(
    request: web.Request, body: bytes, session: ClientSession, upstream: str
) -> web.StreamResponse:
    """Relay the request to `upstream` and stream the answer back chunk by chunk."""
    headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP_HEADERS}
    async with session.request(
        request.method,
        upstream + request.rel_url.path_qs,
        headers=headers,
        data=body if body else None,
        allow_redirects=False,
    ) as answer:
        response = web.StreamResponse(status=answer.status, reason=answer.reason)
        for key, value in answer.headers.items():
            if key.lower() not in _HOP_HEADERS:
                response.headers.add(key, value)
        await response.prepare(request)
        async for chunk in answer.content.iter_any():
            await response.write(chunk)
        await response.write_eof()
        return response


def proxy_app(fault: Fault, upstream: str) -> web.Application:
    """An aiohttp app that applies `fault` and forwards everything it lets through."""
    app = web.Application(client_max_size=64 * 1024 * 1024)
    session_key = web.AppKey("session", ClientSession)

    async def session_context(app: web.Application):  # type: ignore[no-untyped-def]
        # No total timeout: a slow generation is the engine's business, not the proxy's.
        timeout = ClientTimeout(total=None, sock_connect=10)
        async with ClientSession(timeout=timeout, auto_decompress=False) as session:
            app[session_key] = session
            yield

    async def handle(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        answered = await fault(request, body)
        if answered is not None:
            return answered
        return await forward(request, body, request.app[session_key], upstream)

    app.cleanup_ctx.append(session_context)
    app.router.add_route("*", "/{tail:.*}", handle)
    return app


def main(argv: list[str] | None = None) -> None:
    """Entry point of the proxy process."""
    parser = argparse.ArgumentParser(prog="python -m servegate.engine.faults")
    parser.add_argument("fault", choices=sorted(FAULTS))
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream", required=True, help="e.g. http://127.0.0.1:8001")
    parser.add_argument("--threshold-chars", type=int, default=FaultOptions.threshold_chars)
    args = parser.parse_args(argv)
    fault = FAULTS[args.fault].build(FaultOptions(threshold_chars=args.threshold_chars))
    print(f"fault proxy {args.fault}: 127.0.0.1:{args.port} -> {args.upstream}", flush=True)
    # A short shutdown grace: held (hanging) requests must not delay SIGTERM by a minute.
    web.run_app(
        proxy_app(fault, args.upstream.rstrip("/")),
        host="127.0.0.1",
        port=args.port,
        shutdown_timeout=1.0,
        handler_cancellation=True,
        print=None,
        access_log=None,
    )


if __name__ == "__main__":
    main()
