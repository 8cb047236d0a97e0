"""A recorded endpoint answering again: the stored baseline behind `--baseline-run NAME`.

`StoredEndpoint` implements the Endpoint protocol from the requests one side of a stored run
recorded. A request is looked up by its API and its exact body (keys sorted); the k-th time a
body is asked, the k-th recorded answer to it is given, so a path asked twice (the A/A repeat, a
prefix-cache hit) gets what the server answered each time. Timings are moved to now, keeping
every interval: the scaled deadlines and latencies read them as recorded.

A request the recording never sent (cross-scoring the candidate's own text, for one) has no
answer; an error answer is never truth (only a rejection, HTTP 4xx, is the server's own
specified behaviour: a prompt over the context is refused), nor is an empty one (FAULTS 44: a
completion with neither text, reasoning nor tool calls). Each comes back as `not_sent`, naming
the baseline, and the gate lists that check as not measured. Nothing is invented. An embeddings
error answer comes back as it came: the embeddings gate never compares vectors with an error, and
reads it as the live gate does — a generative model fails the batch with HTTP 500 and answers one
input with per-token vectors, so it serves no sentence embeddings (the gate is not applicable;
as `not_sent` it was wrongly *not measured*, and a stored baseline of the reference engine was
inconclusive on every candidate).
"""

from __future__ import annotations

import json
import time
from collections import defaultdict, deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from servegate.endpoints.errors import ErrorCategory, RequestError
from servegate.endpoints.types import (
    Completion,
    Embeddings,
    RawResponse,
    Timing,
    TokenLogprob,
    ToolCall,
    Usage,
)

Result = Completion | Embeddings | RawResponse


def body_key(api: str, body: Mapping[str, Any] | None) -> str:
    """The lookup key of a request: its API and its body as canonical JSON."""
    return api + " " + json.dumps(body or {}, sort_keys=True, default=str, ensure_ascii=True)


def _timing(data: Mapping[str, Any] | None) -> Timing:
    if not data:
        return Timing(sent_ns=0)
    return Timing(
        sent_ns=int(data["sent_ns"]),
        headers_ns=data.get("headers_ns"),
        done_ns=data.get("done_ns"),
        token_chunk_ns=tuple(data.get("token_chunk_ns") or ()),
        token_chunk_tokens=tuple(data.get("token_chunk_tokens") or ()),
        queued_ns=data.get("queued_ns"),
    )


def _error(data: Mapping[str, Any] | None) -> RequestError | None:
    if not data:
        return None
    return RequestError(**{**data, "category": ErrorCategory(data["category"])})


def _usage(data: Mapping[str, Any] | None) -> Usage | None:
    return Usage(**data) if data else None


def _logprob(data: Mapping[str, Any] | None) -> TokenLogprob | None:
    if data is None:
        return None
    top = tuple((str(t), float(lp)) for t, lp in data.get("top") or ())
    return TokenLogprob(token=data["token"], logprob=float(data["logprob"]), top=top)


def _logprobs(data: Iterable[Any] | None) -> tuple[TokenLogprob, ...] | None:
    if data is None:
        return None
    return tuple(lp for lp in (_logprob(d) for d in data) if lp is not None)


def result_from_json(api: str, text: str) -> Result:
    """A result as `RunWriter.record` stored it (dataclasses.asdict; a raw body as text, up to
    RAW_BODY_CHARS). `api` is "chat", "completions", "embeddings" or "METHOD /path"."""
    data = json.loads(text)
    timing, error = _timing(data.get("timing")), _error(data.get("error"))
    if api == "embeddings":
        return Embeddings(
            status=data.get("status"),
            vectors=tuple(tuple(v) for v in data.get("vectors") or ()),
            usage=_usage(data.get("usage")),
            timing=timing,
            error=error,
            model=data.get("model"),
            attempts=data.get("attempts", 1),
            waited_s=data.get("waited_s", 0.0),
        )
    if api not in ("chat", "completions"):  # a raw exchange, recorded as "METHOD /path"
        return RawResponse(
            status=data.get("status"),
            headers=dict(data.get("headers") or {}),
            body=str(data.get("body") or "").encode("utf-8"),
            timing=timing,
            error=error,
        )
    prompt = data.get("prompt_logprobs")
    return Completion(
        status=data.get("status"),
        content=data.get("content"),
        reasoning=data.get("reasoning"),
        tool_calls=tuple(ToolCall(**t) for t in data.get("tool_calls") or ()),
        finish_reason=data.get("finish_reason"),
        usage=_usage(data.get("usage")),
        logprobs=_logprobs(data.get("logprobs")),
        prompt_logprobs=None if prompt is None else tuple(_logprob(p) for p in prompt),
        model=data.get("model"),
        timing=timing,
        error=error,
        flags=tuple(data.get("flags") or ()),
        attempts=data.get("attempts", 1),
        waited_s=data.get("waited_s", 0.0),
    )


def _now(result: Result) -> Result:
    """The result with its timing moved to now, every interval kept."""
    t = result.timing
    if t.sent_ns == 0:
        return result
    shift = time.perf_counter_ns() - t.sent_ns

    def moved(ns: int | None) -> int | None:
        return None if ns is None else ns + shift

    timing = Timing(
        sent_ns=t.sent_ns + shift,
        headers_ns=moved(t.headers_ns),
        done_ns=moved(t.done_ns),
        token_chunk_ns=tuple(ns + shift for ns in t.token_chunk_ns),
        token_chunk_tokens=t.token_chunk_tokens,
        queued_ns=moved(t.queued_ns),
    )
    return replace(result, timing=timing)


def empty_answer(result: Completion) -> bool:
    """A completion that answered nothing: no error, and neither text, reasoning nor tool calls.
    Never kept as the baseline's truth (FAULTS 44)."""
    return result.error is None and not (result.content or result.reasoning or result.tool_calls)


EMPTY = "empty"


def never_truth(api: str, result: Result) -> str | None:
    """Why a recorded answer is never given back as the recording's answer — its error category,
    or EMPTY for an empty completion — or None when it is given back: a rejection (HTTP 4xx) is
    the server's specified behaviour, and an embeddings error is read, never compared."""
    err = result.error
    if err is not None:
        if err.category is ErrorCategory.REJECTED or api == "embeddings":
            return None
        return str(err.category)
    if isinstance(result, Completion) and empty_answer(result):
        return EMPTY
    return None


def _err(found: object) -> RequestError | None:
    return found if isinstance(found, RequestError) else None


@dataclass
class StoredEndpoint:
    """One side of a stored run, answering as it answered then (see the module docstring)."""

    name: str
    base_url: str
    source: str  # how a missing answer names the recording, e.g. "the stored baseline 'v1'"
    models: tuple[str, ...]
    rows: Iterable[tuple[str, str, str]]  # (api, request_json, result_json), in recorded order
    _answers: dict[str, deque[tuple[str, str]]] = field(init=False)

    def __post_init__(self) -> None:
        self._answers = defaultdict(deque)
        for api, request_json, result_json in self.rows:
            self._answers[body_key(api, json.loads(request_json))].append((api, result_json))

    def _answer(self, api: str, body: Mapping[str, Any] | None) -> Result | RequestError | None:
        queue = self._answers.get(body_key(api, body))
        if not queue:
            return None
        stored_api, text = queue.popleft()
        result = result_from_json(stored_api, text)
        why = never_truth(api, result)
        if why is not None:
            what = f"an error ({why})"
            if isinstance(result, Completion) and why == EMPTY:
                what = f"an empty completion (finish_reason {result.finish_reason})"
            return RequestError(
                category=ErrorCategory.NOT_SENT,
                message=f"{self.source} answered this {api} request with {what}, which is never "
                "used as its answer; not measured",
                side=self.name,
            )
        return _now(result)

    def _missing(self, what: str, found: RequestError | None = None) -> RequestError:
        if found is not None:
            return found
        return RequestError(
            category=ErrorCategory.NOT_SENT,
            message=f"{self.source} has no answer to this {what} request (the recording never "
            "sent it); not measured",
            side=self.name,
        )

    async def chat(self, body: Mapping[str, Any], *, deadline_s: float | None = None) -> Completion:
        found = self._answer("chat", body)
        if isinstance(found, Completion):
            return found
        return Completion(status=None, error=self._missing("chat", _err(found)))

    async def completion(
        self, body: Mapping[str, Any], *, deadline_s: float | None = None
    ) -> Completion:
        found = self._answer("completions", body)
        if isinstance(found, Completion):
            return found
        return Completion(status=None, error=self._missing("completions", _err(found)))

    async def embeddings(
        self, body: Mapping[str, Any], *, deadline_s: float | None = None
    ) -> Embeddings:
        found = self._answer("embeddings", body)
        if isinstance(found, Embeddings):
            return found
        return Embeddings(status=None, error=self._missing("embeddings", _err(found)))

    async def raw(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any] | None = None,
        *,
        deadline_s: float | None = None,
    ) -> RawResponse:
        found = self._answer(f"{method} {path}", body or {})
        if found is None and method == "GET" and path.rstrip("/") == "/models":
            # The preflight listing is not recorded: answered from the fingerprint.
            listing = {
                "object": "list",
                "data": [{"id": m, "object": "model"} for m in self.models],
            }
            found = RawResponse(
                status=200,
                headers={"content-type": "application/json"},
                body=json.dumps(listing).encode(),
            )
        if isinstance(found, RawResponse):
            return found
        return RawResponse(status=None, error=self._missing(f"{method} {path}", _err(found)))

    async def aclose(self) -> None:
        return None
