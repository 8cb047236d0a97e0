"""The fault layer: named faults, each the emulation of a real engine bug class, and its proxy.

Each fault is a factory whose arguments are its config (`hang_long(options)`) and which returns a
`Fault`: an async callable that sees each request first and either answers it itself (hang-long),
returns a `Relay` saying what to rewrite on the way through (the request body, the JSON answer,
the SSE events, added latency), or returns None to let it through byte for byte. Everything a
fault does not target passes unchanged. The rewrites themselves are pure functions in
`fault_rewrites`; the relaying is in `fault_proxy`.

Run as `python -m servegate.engine.faults FAULT --port P --upstream http://127.0.0.1:Q`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path

from aiohttp import web

from servegate.engine.fault_proxy import IN_FLIGHT, Fault, Payload, Relay, proxy_app
from servegate.engine.fault_rewrites import (
    DEFAULT_REASONING_TEXT,
    DEFAULT_SYSTEM_TEXT,
    JSON_FORMATS,
    TRUNCATION_KEYS,
    collapse_choice_events,
    collapse_choices,
    drift_template,
    drop_keys,
    drop_tool_fragment_events,
    has_tools,
    ignore_eos,
    leak_reasoning,
    leak_reasoning_events,
    mirror_content,
    narrow_nucleus,
    neutralise_penalties,
    perturb_embeddings,
    replace_temperature,
    response_format_type,
    split_utf8_event,
    truncate_json,
    truncate_json_events,
)

__all__ = ["FAULTS", "Fault", "FaultOptions", "FaultSpec", "Relay", "prompt_chars", "proxy_app"]


@dataclass(frozen=True)
class FaultOptions:
    """Knobs shared by the fault factories; each factory reads the ones it needs."""

    threshold_chars: int = 2000  # hang-long: longer prompts never get an answer
    delay_ms: int = 200  # slow: before forwarding and between streamed events
    drop_fragment: int = 2  # stream-tool-args: which arguments fragment (1-based) goes missing
    reasoning_text: str = DEFAULT_REASONING_TEXT  # reasoning-leak: put before the answer
    system_text: str = DEFAULT_SYSTEM_TEXT  # template-drift: added to the system prompt
    truncate_fraction: float = 0.3  # json-truncated: share of the content cut off the end
    runaway_max_tokens: int = 256  # eos-ignored: the length limit when a request sets none
    request_log: str = ""  # any fault: append each request received to this JSONL file
    perturb_scale: float = 0.1  # embed-perturb: noise length as a fraction of each vector's norm
    default_temperature: float = 0.7  # temperature-default: what replaces a sampled temperature
    nucleus_factor: float = 0.5  # nucleus-narrowed: top_p below 1 is multiplied by this

    def __post_init__(self) -> None:
        if self.threshold_chars < 0 or self.delay_ms < 0:
            raise ValueError("threshold_chars and delay_ms must not be negative")
        if self.drop_fragment < 1 or self.runaway_max_tokens < 1:
            raise ValueError("drop_fragment and runaway_max_tokens must be at least 1")
        if not 0 < self.truncate_fraction <= 1:
            raise ValueError("truncate_fraction must be in (0, 1]")
        if not self.perturb_scale > 0:
            raise ValueError("perturb_scale must be greater than 0")
        if not self.default_temperature > 0:
            raise ValueError("default_temperature must be greater than 0 (sampled-greedy is 0)")
        if not 0 < self.nucleus_factor < 1:
            raise ValueError("nucleus_factor must be in (0, 1)")


@dataclass(frozen=True)
class FaultSpec:
    """A registered fault: one-line description and a factory taking FaultOptions."""

    description: str
    build: Callable[[FaultOptions], Fault]


def options_argv(options: FaultOptions) -> list[str]:
    """Command-line flags of the proxy process that rebuild `options`."""
    return [
        arg
        for field in fields(options)
        for arg in (f"--{field.name.replace('_', '-')}", str(getattr(options, field.name)))
    ]


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


def _request_payload(request: web.Request, body: bytes, *paths: str) -> Payload | None:
    """The JSON object body of a POST to one of `paths` (e.g. "/chat/completions"), else None."""
    route = request.path.rstrip("/")
    if request.method != "POST" or not any(route.endswith(path) for path in paths):
        return None
    try:
        payload = json.loads(body)
    except ValueError:
        return None
    return payload if isinstance(payload, dict) else None


def slow(options: FaultOptions) -> Fault:
    """Every request waits `delay_ms` before it is forwarded, and again between SSE events."""
    delay_s = options.delay_ms / 1000

    async def fault(request: web.Request, body: bytes) -> Relay:
        return Relay(body, delay_s=delay_s, event_delay_s=delay_s)

    return fault


def stream_tool_args(options: FaultOptions) -> Fault:
    """Streamed tool-call arguments lose one fragment, as vLLM's streaming tool parsers have."""

    async def fault(request: web.Request, body: bytes) -> Relay | None:
        payload = _request_payload(request, body, "/chat/completions")
        if payload is None or not payload.get("stream") or not has_tools(payload):
            return None
        return Relay(body, events=lambda: drop_tool_fragment_events(options.drop_fragment))

    return fault


def reasoning_leak(options: FaultOptions) -> Fault:
    """Chat content starts with reasoning the engine should have split off (`<think>…</think>`)."""
    text = options.reasoning_text

    async def fault(request: web.Request, body: bytes) -> Relay | None:
        if _request_payload(request, body, "/chat/completions") is None:
            return None
        return Relay(
            body,
            answer=lambda payload: leak_reasoning(payload, text),
            events=lambda: leak_reasoning_events(text),
        )

    return fault


def template_drift(options: FaultOptions) -> Fault:
    """The chat template changed: chats reach the engine with a different system prompt."""

    async def fault(request: web.Request, body: bytes) -> Relay | None:
        payload = _request_payload(request, body, "/chat/completions")
        drifted = drift_template(payload, options.system_text) if payload is not None else None
        return None if drifted is None else Relay(json.dumps(drifted).encode())

    return fault


def json_truncated(options: FaultOptions) -> Fault:
    """JSON-mode answers are cut short (the closing brace at least); finish_reason unchanged."""
    fraction = options.truncate_fraction

    async def fault(request: web.Request, body: bytes) -> Relay | None:
        payload = _request_payload(request, body, "/chat/completions")
        if payload is None or response_format_type(payload) not in JSON_FORMATS:
            return None
        return Relay(
            body,
            answer=lambda answer: truncate_json(answer, fraction),
            events=lambda: truncate_json_events(fraction),
        )

    return fault


def eos_ignored(options: FaultOptions) -> Fault:
    """The engine generates past EOS until max_tokens: finish_reason `length`, not `stop`."""

    async def fault(request: web.Request, body: bytes) -> Relay | None:
        payload = _request_payload(request, body, "/chat/completions", "/completions")
        rewritten = ignore_eos(payload, options.runaway_max_tokens) if payload else None
        return None if rewritten is None else Relay(json.dumps(rewritten).encode())

    return fault


def batch_corrupt(options: FaultOptions) -> Fault:
    """Content is corrupted only while more than one request is in flight: an answer given alone
    is the engine's own, the same prompt batched with another comes back with every word's
    letters reversed (the class of batch-only kernel and scheduler bugs: correct alone, wrong
    when batching)."""

    async def fault(request: web.Request, body: bytes) -> Relay | None:
        if _request_payload(request, body, "/chat/completions", "/completions") is None:
            return None
        in_flight = request.app[IN_FLIGHT]

        def answer(payload: Payload) -> Payload | None:
            return mirror_content(payload) if in_flight.count > 1 else None

        def events() -> Callable[[Payload], list[Payload] | None]:
            def event(payload: Payload) -> list[Payload] | None:
                mirrored = mirror_content(payload) if in_flight.count > 1 else None
                return None if mirrored is None else [mirrored]

            return event

        return Relay(body, answer=answer, events=events)

    return fault


def stream_utf8(options: FaultOptions) -> Fault:
    """Streamed answers lose their non-ASCII characters: each becomes one U+FFFD per UTF-8 byte,
    as from a server that splits multi-byte characters between chunks and decodes each chunk
    alone (`split_utf8_text`). Non-streamed answers are untouched."""

    async def fault(request: web.Request, body: bytes) -> Relay | None:
        payload = _request_payload(request, body, "/chat/completions", "/completions")
        if payload is None or not payload.get("stream"):
            return None
        return Relay(body, events=lambda: split_utf8_event)

    return fault


def embed_perturb(options: FaultOptions) -> Fault:
    """Every embedding vector comes back moved off its direction: cosine 1 / sqrt(1 + s²) to the
    engine's own (s = perturb_scale; 0.995 at the default 0.1), all else untouched — the class
    of a kernel that shifts embedding or reranker scores on one backend (vLLM #35569)."""
    scale = options.perturb_scale

    async def fault(request: web.Request, body: bytes) -> Relay | None:
        if _request_payload(request, body, "/embeddings") is None:
            return None
        return Relay(body, answer=lambda payload: perturb_embeddings(payload, scale))

    return fault


def _rewrite_request(rewrite: Callable[[Payload], Payload | None]) -> Fault:
    """A fault that rewrites chat and completion request bodies and nothing else."""

    async def fault(request: web.Request, body: bytes) -> Relay | None:
        payload = _request_payload(request, body, "/chat/completions", "/completions")
        rewritten = rewrite(payload) if payload is not None else None
        return None if rewritten is None else Relay(json.dumps(rewritten).encode())

    return fault


def temperature_default(options: FaultOptions) -> Fault:
    """A sampled request's temperature is replaced by `default_temperature`, as when vLLM
    0.8.0-0.8.1 took the model's generation-config defaults over the request (#15241);
    temperature-0 requests are untouched."""
    return _rewrite_request(lambda p: replace_temperature(p, options.default_temperature))


def sampled_greedy(options: FaultOptions) -> Fault:
    """Sampled requests are served greedily (temperature 0): every draw is the argmax."""
    return _rewrite_request(lambda p: replace_temperature(p, 0.0))


def sampler_defaults(options: FaultOptions) -> Fault:
    """A sampled request loses top_p, top_k and min_p: the engine's own defaults apply (llama.cpp
    top_k 40, top_p 0.95, min_p 0.05; vLLM none of them)."""
    return _rewrite_request(lambda p: drop_keys(p, TRUNCATION_KEYS))


def nucleus_narrowed(options: FaultOptions) -> Fault:
    """top_p below 1 is multiplied by `nucleus_factor`: a sampler that truncates the nucleus
    wrongly (the class of vLLM #26859's FlashInfer top-p/top-k sampler)."""
    return _rewrite_request(lambda p: narrow_nucleus(p, options.nucleus_factor))


def seed_dropped(options: FaultOptions) -> Fault:
    """The request's `seed` is dropped: the same seed no longer reproduces (vLLM #21310)."""
    return _rewrite_request(lambda p: drop_keys(p, ("seed",)))


def penalties_stripped(options: FaultOptions) -> Fault:
    """presence, frequency and repetition penalties of sampled requests do nothing (set to 0,
    0 and 1): a penalty with no effect (vllm-ascend #7785, SGLang #3139)."""
    return _rewrite_request(neutralise_penalties)


def logit_bias_dropped(options: FaultOptions) -> Fault:
    """A sampled request's `logit_bias` is dropped: banned tokens come back, forced ones do not
    (the class of a sampler path that skips the bias, as llama-cpp-python's chat handler does)."""
    return _rewrite_request(lambda p: drop_keys(p, ("logit_bias",)))


def n_collapsed(options: FaultOptions) -> Fault:
    """Answers with n > 1 choices repeat choice 0 under every index, streamed or not (vLLM
    #12584's one output for n > 1)."""

    async def fault(request: web.Request, body: bytes) -> Relay | None:
        payload = _request_payload(request, body, "/chat/completions", "/completions")
        n = payload.get("n") if payload is not None else None
        if not isinstance(n, int) or n < 2:
            return None
        return Relay(body, answer=collapse_choices, events=lambda: collapse_choice_events(n))

    return fault


def passthrough(options: FaultOptions) -> Fault:
    """No fault at all: the proxy in front of a clean engine, e.g. to log what it is sent."""

    async def fault(request: web.Request, body: bytes) -> None:
        return None

    return fault


# Explicit registry, in the order `servegate engine variants` lists them.
FAULTS: dict[str, FaultSpec] = {
    "hang-long": FaultSpec(
        "prompts over a size threshold never get response headers; /health and short prompts work",
        hang_long,
    ),
    "stream-tool-args": FaultSpec(
        "streamed tool-call arguments miss one fragment; non-streamed calls are intact",
        stream_tool_args,
    ),
    "reasoning-leak": FaultSpec(
        "chat content starts with <think>…</think> reasoning that should have been split off",
        reasoning_leak,
    ),
    "template-drift": FaultSpec(
        "a changed chat template adds to the system prompt: more prompt_tokens, other answers",
        template_drift,
    ),
    "json-truncated": FaultSpec(
        "JSON-mode (response_format) answers are cut before their closing brace",
        json_truncated,
    ),
    "eos-ignored": FaultSpec(
        "generation runs past EOS to max_tokens: finish_reason length where it was stop",
        eos_ignored,
    ),
    "batch-corrupt": FaultSpec(
        "answers are corrupted (each word mirrored) only while more than one request is in "
        "flight; a request served alone is untouched",
        batch_corrupt,
    ),
    "stream-utf8": FaultSpec(
        "streamed chat/completion text: each non-ASCII character becomes one U+FFFD per UTF-8 "
        "byte (split between chunks, each decoded alone); non-streamed answers are untouched",
        stream_utf8,
    ),
    "embed-perturb": FaultSpec(
        "each /v1/embeddings vector is moved off its direction (cosine 0.995 to the engine's at "
        "the default perturb_scale 0.1); everything else is untouched",
        embed_perturb,
    ),
    "temperature-default": FaultSpec(
        "a sampled request's temperature is replaced by default_temperature (0.7); "
        "temperature-0 requests are exact",
        temperature_default,
    ),
    "sampled-greedy": FaultSpec(
        "sampled requests are served greedily (temperature 0)",
        sampled_greedy,
    ),
    "sampler-defaults": FaultSpec(
        "sampled requests lose top_p, top_k and min_p: the engine's own defaults apply",
        sampler_defaults,
    ),
    "nucleus-narrowed": FaultSpec(
        "top_p below 1 is multiplied by nucleus_factor (0.5): a smaller nucleus than asked",
        nucleus_narrowed,
    ),
    "seed-dropped": FaultSpec(
        "the request's seed is dropped: the same seed no longer reproduces",
        seed_dropped,
    ),
    "penalties-stripped": FaultSpec(
        "presence, frequency and repetition penalties of sampled requests do nothing (0, 0, 1)",
        penalties_stripped,
    ),
    "logit-bias-dropped": FaultSpec(
        "a sampled request's logit_bias is dropped: banned tokens are drawn, forced ones not",
        logit_bias_dropped,
    ),
    "n-collapsed": FaultSpec(
        "answers with n > 1 choices repeat choice 0 under every index, streamed or not",
        n_collapsed,
    ),
    "passthrough": FaultSpec(
        "no fault: every request forwarded unchanged (with request_log: each one written down)",
        passthrough,
    ),
    "slow": FaultSpec(
        "adds delay_ms before every request and between streamed events",
        slow,
    ),
}


def main(argv: list[str] | None = None) -> None:
    """Entry point of the proxy process."""
    parser = argparse.ArgumentParser(prog="python -m servegate.engine.faults")
    parser.add_argument("fault", choices=sorted(FAULTS))
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream", required=True, help="e.g. http://127.0.0.1:8001")
    for field in fields(FaultOptions):
        default = field.default
        parser.add_argument(
            f"--{field.name.replace('_', '-')}", type=type(default), default=default
        )
    args = parser.parse_args(argv)
    options = FaultOptions(
        **{field.name: getattr(args, field.name) for field in fields(FaultOptions)}
    )
    fault = FAULTS[args.fault].build(options)
    print(f"fault proxy {args.fault}: 127.0.0.1:{args.port} -> {args.upstream}", flush=True)
    # A short shutdown grace: held (hanging) requests must not delay SIGTERM by a minute.
    web.run_app(
        proxy_app(
            fault,
            args.upstream.rstrip("/"),
            Path(options.request_log) if options.request_log else None,
        ),
        host="127.0.0.1",
        port=args.port,
        shutdown_timeout=1.0,
        handler_cancellation=True,
        print=None,
        access_log=None,
    )


if __name__ == "__main__":
    main()
