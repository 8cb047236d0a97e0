"""Completions built by hand: the metric and check functions are tested on plain data."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from servegate.endpoints.errors import ErrorCategory, RequestError
from servegate.endpoints.types import Completion, Timing, TokenLogprob, ToolCall, Usage

MS = 1_000_000


def _completion(
    chunks_ms: tuple[float, ...] = (),
    tokens: tuple[int, ...] | None = None,
    *,
    usage: int | None = None,
    prompt: int | None = None,
    logprobs: int | None = None,
    text: str = "fine words",
    error: ErrorCategory | None = None,
    finish: str | None = "stop",
    tool_calls: tuple[ToolCall, ...] = (),
    flags: tuple[str, ...] = (),
) -> Completion:
    """A streamed answer sent at t=0 whose token chunks arrived at `chunks_ms`."""
    stamps = tuple(int(t * MS) for t in chunks_ms)
    timing = Timing(
        sent_ns=0,
        token_chunk_ns=stamps,
        token_chunk_tokens=tokens if tokens is not None else (1,) * len(stamps),
        done_ns=(stamps[-1] + MS) if stamps else 5 * MS,
    )
    return Completion(
        status=200,
        content=text,
        finish_reason=finish,
        usage=Usage(prompt_tokens=prompt, completion_tokens=usage)
        if usage is not None or prompt is not None
        else None,
        logprobs=tuple(TokenLogprob("t", -0.1) for _ in range(logprobs))
        if logprobs is not None
        else None,
        timing=timing,
        error=RequestError(error, "failed") if error is not None else None,
        tool_calls=tool_calls,
        flags=flags,
    )


@pytest.fixture
def completion() -> Callable[..., Completion]:
    """`completion(chunks_ms, tokens, usage=…, …)`: a hand-built streamed Completion."""
    return _completion
