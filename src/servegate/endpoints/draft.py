"""A completion being assembled (from a body or a stream) and the one place it becomes a Completion.

Finishing is where intake rules apply to both paths alike: lone surrogates are cleaned and flagged,
echoed prompt logprobs are split off, tool arguments that are not JSON are flagged, and missing
usage is flagged so token metrics are marked estimated.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from servegate.endpoints.errors import RequestError
from servegate.endpoints.logprobs import split_echo
from servegate.endpoints.text import clean_surrogates
from servegate.endpoints.types import Completion, Timing, TokenLogprob, ToolCall, Usage


@dataclass(frozen=True, slots=True)
class RequestContext:
    """What the request asked for that changes how the answer is read."""

    want_usage: bool = False  # stream_options.include_usage on a stream; always for a body
    echo: bool = False
    prompt_chars: int | None = None

    @classmethod
    def of(cls, body: Any, *, streaming: bool) -> RequestContext:
        options = body.get("stream_options") if streaming else None
        want = bool(options.get("include_usage")) if isinstance(options, dict) else not streaming
        prompt = body.get("prompt")
        return cls(
            want_usage=want,
            echo=bool(body.get("echo")),
            prompt_chars=len(prompt) if isinstance(prompt, str) else None,
        )


def body_error(obj: Any) -> str | None:
    """The message of an error object in any of the three shapes servers send, else None."""
    if not isinstance(obj, dict):
        return None
    error = obj.get("error")
    if isinstance(error, dict):
        message = error.get("message")
        return str(message) if message is not None else str(error)
    if isinstance(error, str):
        return error
    if obj.get("object") == "error":
        return str(obj.get("message", "error object without message"))
    return None


def parse_usage(obj: Any) -> Usage | None:
    """A `usage` object; None when absent or not an object."""
    if not isinstance(obj, dict):
        return None

    def count(value: Any) -> int | None:
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    details = obj.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    return Usage(
        prompt_tokens=count(obj.get("prompt_tokens")),
        completion_tokens=count(obj.get("completion_tokens")),
        total_tokens=count(obj.get("total_tokens")),
        cached_tokens=count(cached),
    )


@dataclass(slots=True)
class CompletionDraft:
    """Mutable parts of one choice; `content` stays None until the server sends a string."""

    content: list[str] | None = None
    reasoning: list[str] | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    finish_reason: str | None = None
    usage: Usage | None = None
    model: str | None = None
    logprobs: list[TokenLogprob] | None = None
    legacy: list[TokenLogprob | None] | None = None  # completions shape, may hold echoed prompt
    native_prompt: list[TokenLogprob | None] | None = None  # vLLM's `prompt_logprobs`
    text_offsets: list[int] = field(default_factory=list)
    flags: set[str] = field(default_factory=set)
    raw: dict[str, Any] | None = None

    def add_content(self, text: str) -> None:
        if self.content is None:
            self.content = []
        self.content.append(text)

    def add_reasoning(self, text: str) -> None:
        if self.reasoning is None:
            self.reasoning = []
        self.reasoning.append(text)

    def finish(
        self,
        ctx: RequestContext,
        *,
        status: int | None,
        timing: Timing,
        error: RequestError | None = None,
    ) -> Completion:
        content = self._clean(self.content)
        reasoning = self._clean(self.reasoning)
        calls = tuple(self._clean_call(c) for c in self.tool_calls)
        if any(not c.arguments_valid for c in calls):
            self.flags.add("invalid_tool_args")
        logprobs, prompt_logprobs = self._logprobs(ctx)
        if ctx.want_usage and (self.usage is None or self.usage.completion_tokens is None):
            self.flags.add("usage_missing")
        return Completion(
            status=status,
            content=content,
            reasoning=reasoning,
            tool_calls=calls,
            finish_reason=self.finish_reason,
            usage=self.usage,
            logprobs=logprobs,
            prompt_logprobs=prompt_logprobs,
            model=self.model,
            timing=timing,
            error=error,
            flags=tuple(sorted(self.flags)),
            raw=self.raw,
        )

    def _clean(self, parts: list[str] | None) -> str | None:
        if parts is None:
            return None
        text, cleaned = clean_surrogates("".join(parts))
        if cleaned:
            self.flags.add("surrogates_cleaned")
        return text

    def _clean_call(self, call: ToolCall) -> ToolCall:
        name = self._clean([call.name]) if call.name is not None else None
        arguments = self._clean([call.arguments]) or ""
        return ToolCall(index=call.index, id=call.id, name=name, arguments=arguments)

    def _logprobs(
        self, ctx: RequestContext
    ) -> tuple[tuple[TokenLogprob, ...] | None, tuple[TokenLogprob | None, ...] | None]:
        if self.legacy is None:
            generated = tuple(self.logprobs) if self.logprobs is not None else None
            native = tuple(self.native_prompt) if self.native_prompt is not None else None
            return generated, native
        entries = self.legacy
        prompt: list[TokenLogprob | None] | None = None
        if ctx.echo:
            prompt_tokens = self.usage.prompt_tokens if self.usage else None
            split = split_echo(
                entries,
                self.text_offsets,
                prompt_tokens=prompt_tokens,
                prompt_chars=ctx.prompt_chars,
            )
            if split is None:
                self.flags.add("echo_split_unknown")
            else:
                prompt, entries = split
        generated = tuple(e for e in entries if e is not None)
        if prompt is None and self.native_prompt is not None:
            prompt = self.native_prompt
        return generated, (tuple(prompt) if prompt is not None else None)
