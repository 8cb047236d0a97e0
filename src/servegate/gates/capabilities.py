"""Capability discovery: what a server really supports, found by trying it, not by reading docs.

A gate that needs a capability the server lacks reports the metric as inconclusive; the startup
gate reports a capability the baseline has and the candidate lost as a regression.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from servegate.endpoints.json_text import is_json, parse_json
from servegate.endpoints.protocol import Endpoint
from servegate.endpoints.responses import respond
from servegate.endpoints.types import Completion
from servegate.gates.pair import ISOLATION_REQUEST

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather for a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}


@dataclass(frozen=True, slots=True)
class Capability:
    """One capability as observed: supported is None when the probe itself could not run."""

    name: str
    supported: bool | None
    detail: str


Prober = Callable[
    [Endpoint, Callable[[Mapping[str, Any]], dict[str, Any]], float], Awaitable[Capability]
]


def _failed(name: str, result: Completion) -> Capability:
    # An HTTP answer (4xx, 5xx, an error body) is the server refusing: not supported. No answer at
    # all (refused connection, timeout) says nothing about the capability: unknown.
    assert result.error is not None
    supported = False if result.status is not None else None
    return Capability(name, supported, f"{result.error.category}: {result.error.message[:120]}")


def _msg(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


async def _logprobs(
    ep: Endpoint, body: Callable[[Mapping[str, Any]], dict[str, Any]], dl: float
) -> Capability:
    r = await ep.chat(
        body(
            {
                "messages": _msg("Say hi."),
                "max_tokens": 2,
                "temperature": 0,
                "logprobs": True,
                "top_logprobs": 5,
            }
        ),
        deadline_s=dl,
    )
    if r.error is not None:
        return _failed("logprobs", r)
    if not r.logprobs:
        return Capability("logprobs", False, "no logprobs in the answer")
    top = min(len(t.top) for t in r.logprobs)
    return Capability("logprobs", True, f"top_logprobs asked 5, got {top}")


async def _echo(
    ep: Endpoint, body: Callable[[Mapping[str, Any]], dict[str, Any]], dl: float
) -> Capability:
    r = await ep.completion(
        body(
            {
                "prompt": "The sky is blue",
                "max_tokens": 1,
                "temperature": 0,
                "echo": True,
                "logprobs": 1,
            }
        ),
        deadline_s=dl,
    )
    if r.error is not None:
        return _failed("prompt_logprobs", r)
    n = len(r.prompt_logprobs or ())
    return Capability("prompt_logprobs", n > 0, f"{n} prompt token logprobs with echo")


async def _stream_usage(
    ep: Endpoint, body: Callable[[Mapping[str, Any]], dict[str, Any]], dl: float
) -> Capability:
    r = await ep.chat(
        body(
            {
                "messages": _msg("Say hi."),
                "max_tokens": 4,
                "temperature": 0,
                "stream": True,
                "stream_options": {"include_usage": True},
            }
        ),
        deadline_s=dl,
    )
    if r.error is not None:
        return _failed("stream_usage", r)
    ok = r.usage is not None and r.usage.completion_tokens is not None
    detail = "usage chunk present" if ok else "no usage chunk in stream"
    if "no_done_after_finish" in r.flags:
        detail += "; the stream ends after its finish_reason without data: [DONE]"
    return Capability("stream_usage", ok, detail)


async def _tools(
    ep: Endpoint, body: Callable[[Mapping[str, Any]], dict[str, Any]], dl: float
) -> Capability:
    choice = {"type": "function", "function": {"name": "get_weather"}}
    r = await ep.chat(
        body(
            {
                "messages": _msg("What is the weather in Paris?"),
                "max_tokens": 48,
                "temperature": 0,
                "tools": [WEATHER_TOOL],
                "tool_choice": choice,
            }
        ),
        deadline_s=dl,
    )
    if r.error is not None:
        return _failed("tools", r)
    names = [c.name for c in r.tool_calls]
    return Capability("tools", "get_weather" in names, f"tool_calls: {names or 'none'}")


async def _json_mode(
    ep: Endpoint, body: Callable[[Mapping[str, Any]], dict[str, Any]], dl: float
) -> Capability:
    r = await ep.chat(
        body(
            {
                "messages": _msg('Reply with the JSON object {"a": 1} and nothing else.'),
                "max_tokens": 48,
                "temperature": 0,
                "response_format": {"type": "json_object"},
            }
        ),
        deadline_s=dl,
    )
    if r.error is not None:
        return _failed("json_object", r)
    if not is_json(r.text):
        if r.finish_reason == "length" and r.text.lstrip().startswith("{"):
            # Constrained output cut by max_tokens: the mode works, the model rambled.
            return Capability("json_object", True, "JSON-shaped output, cut at max_tokens")
        return Capability("json_object", False, f"content is not JSON: {r.text[:60]!r}")
    return Capability("json_object", True, "content parses as JSON")


async def _embeddings(
    ep: Endpoint, body: Callable[[Mapping[str, Any]], dict[str, Any]], dl: float
) -> Capability:
    r = await ep.embeddings(body({"input": "hello world"}), deadline_s=dl)
    if r.error is not None:
        return Capability(
            "embeddings",
            False if r.status is not None else None,
            f"{r.error.category}: {r.error.message[:120]}",
        )
    dim = len(r.vectors[0]) if r.vectors else 0
    return Capability("embeddings", dim > 0, f"dimension {dim}")


async def _json_schema(
    ep: Endpoint, body: Callable[[Mapping[str, Any]], dict[str, Any]], dl: float
) -> Capability:
    schema = {
        "type": "object",
        "properties": {"answer": {"type": "integer"}},
        "required": ["answer"],
    }
    fmt = {"type": "json_schema", "json_schema": {"name": "answer", "schema": schema}}
    r = await ep.chat(
        body(
            {
                "messages": _msg("What is 2+3? Reply in JSON."),
                "max_tokens": 24,
                "temperature": 0,
                "response_format": fmt,
            }
        ),
        deadline_s=dl,
    )
    if r.error is not None:
        return _failed("json_schema", r)
    value, error = parse_json(r.text)
    if error is not None:
        return Capability("json_schema", False, f"content is not JSON: {r.text[:60]!r}")
    ok = isinstance(value, dict) and isinstance(value.get("answer"), int)
    return Capability("json_schema", ok, "content matches the schema" if ok else f"{value!r:.60}")


async def _seed(
    ep: Endpoint, body: Callable[[Mapping[str, Any]], dict[str, Any]], dl: float
) -> Capability:
    request = {
        "messages": _msg("Write one word."),
        "max_tokens": 8,
        "temperature": 1.0,
        "seed": 1234,
    }
    # Isolate both samples: a server that reuses the previous request's KV prefix computes the
    # second one differently, which would read as an ignored seed.
    await ep.completion(body(ISOLATION_REQUEST), deadline_s=dl)
    first = await ep.chat(body(request), deadline_s=dl)
    if first.error is not None:
        return _failed("seed", first)
    await ep.completion(body(ISOLATION_REQUEST), deadline_s=dl)
    second = await ep.chat(body(request), deadline_s=dl)
    if second.error is not None:
        return _failed("seed", second)
    same = first.text == second.text
    if not same:
        return Capability("seed", False, "same seed gave different samples")
    # The same text twice proves a seed only if another seed gives another text: a server that
    # does not sample at all (transformers serve 5.24 ignores `temperature`) repeats itself too.
    await ep.completion(body(ISOLATION_REQUEST), deadline_s=dl)
    other = await ep.chat(body({**request, "seed": 4321}), deadline_s=dl)
    if other.error is not None:
        return _failed("seed", other)
    if other.text == first.text:
        return Capability(
            "seed",
            None,
            "seeds 1234 and 4321 gave the same text at temperature 1: the server does not "
            "sample, so a seed cannot be judged",
        )
    return Capability("seed", True, "same seed, same sample; another seed, another sample")


def _raw_prober(name: str, path: str) -> Prober:
    async def probe(
        ep: Endpoint, body: Callable[[Mapping[str, Any]], dict[str, Any]], dl: float
    ) -> Capability:
        r = await ep.raw("GET", path, deadline_s=dl)
        if r.error is not None:
            return Capability(name, None, f"{r.error.category}: {r.error.message[:120]}")
        return Capability(name, r.ok, f"HTTP {r.status}")

    return probe


def _score_prober(name: str, path: str, request: Mapping[str, Any], key: str) -> Prober:
    """vLLM-style `/score` or `/rerank`: present when it answers 2xx with numeric `key`s."""

    async def probe(
        ep: Endpoint, body: Callable[[Mapping[str, Any]], dict[str, Any]], dl: float
    ) -> Capability:
        r = await ep.raw("POST", path, body(request), deadline_s=dl)
        if r.error is not None:
            return Capability(name, None, f"{r.error.category}: {r.error.message[:120]}")
        if not r.ok:
            return Capability(name, False, f"HTTP {r.status}")
        try:
            payload = r.json()
        except ValueError:
            return Capability(name, False, f"HTTP {r.status}, body is not JSON")
        items = (
            payload.get("data" if name == "score" else "results")
            if isinstance(payload, dict)
            else None
        )
        scores = [i.get(key) for i in items or () if isinstance(i, dict)]
        ok = bool(scores) and all(isinstance(s, int | float) for s in scores)
        return Capability(name, ok, f"{len(scores)} scores" if ok else f"no numeric {key}")

    return probe


async def _responses(
    ep: Endpoint, body: Callable[[Mapping[str, Any]], dict[str, Any]], dl: float
) -> Capability:
    """`POST /responses` (the Responses API) answers a response object with output text."""
    answer = await respond(ep, body({"input": "Say OK.", "max_output_tokens": 4}), deadline_s=dl)
    result = answer.completion
    if result.error is not None:
        return _failed("responses", result)
    return Capability("responses", True, f"status {answer.response_status}, {result.text!r}")


_PAIR = {"text_1": "What is 2+2?", "text_2": ["4", "Paris"]}
_RERANK = {"query": "What is 2+2?", "documents": ["4", "Paris"]}

PROBERS: dict[str, Prober] = {
    "logprobs": _logprobs,
    "prompt_logprobs": _echo,
    "stream_usage": _stream_usage,
    "tools": _tools,
    "json_object": _json_mode,
    "json_schema": _json_schema,
    "seed": _seed,
    "responses": _responses,
    "embeddings": _embeddings,
    "score": _score_prober("score", "score", _PAIR, "score"),
    "rerank": _score_prober("rerank", "rerank", _RERANK, "relevance_score"),
    "version": _raw_prober("version", "../version"),
    "metrics": _raw_prober("metrics", "../metrics"),
}


async def discover(
    endpoint: Endpoint, model: str | None, *, deadline_s: float = 20.0
) -> dict[str, Capability]:
    """Try every capability on one endpoint, one request at a time."""

    def body(request: Mapping[str, Any]) -> dict[str, Any]:
        return {**request, "model": model} if model else dict(request)

    found: dict[str, Capability] = {}
    for name, prober in PROBERS.items():
        found[name] = await prober(endpoint, body, deadline_s)
    return found
