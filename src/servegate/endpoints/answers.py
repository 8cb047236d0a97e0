"""One classification of one answer: ok, or the first thing wrong with it — and the two rules
that compare an answer with another.

The gates, the load checks, the proxy and the canary read an answer the same way: a request that
failed (its error category from the endpoints' parser), an HTTP 200 that carries an error, a
stream that breaks or ends without a finish reason, an empty answer, degenerate text
(`degeneration.is_severe`), text that does not parse where JSON was asked (`json_text`), tool-call
arguments that are not a JSON object. The first problem found is the class; every content problem
found is kept too (`problems`), so a rate of one kind (degenerate answers, say) counts an answer
that also has another. Relative to a reference answer (the baseline's, the primary's):
`degenerate_relative` (degenerate where the reference is not) and `same_answer` (exact match:
the text and the tool calls, name and arguments, in order).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from servegate.endpoints.errors import HUNG
from servegate.endpoints.json_text import is_json
from servegate.endpoints.types import Completion
from servegate.stats.degeneration import (
    SOUP,
    degeneration_metrics,
    is_severe,
    punctuation_soup,
    severe_kind,
)

__all__ = [
    "AnswerClass",
    "AnswerClassification",
    "classify_answer",
    "classify_completion",
    "content_problems",
    "degenerate_relative",
    "same_answer",
]


class AnswerClass(StrEnum):
    OK = "ok"
    FAILED = "failed"  # HTTP status >= 400 or a transport failure
    TIMEOUT = "timeout"  # no answer in time, or silence after the headers
    ABANDONED = "abandoned"  # the client gave up before the answer was complete
    ERROR_BODY = "error_body"  # HTTP 200 carrying an error object
    STREAM_ERROR = "stream_error"  # an error event in the stream
    TRUNCATED = "truncated"  # a stream cut before [DONE] or without a finish reason
    EMPTY = "empty"  # no text and no tool call
    DEGENERATE = "degenerate"
    INVALID_JSON = "invalid_json"  # response_format asked for JSON; the text does not parse
    INVALID_TOOL_ARGS = "invalid_tool_args"


# Request error categories (endpoints.errors.ErrorCategory values) that are a class of their own;
# every other category is FAILED.
_ERROR_CLASSES = {
    **{category.value: AnswerClass.TIMEOUT for category in HUNG},
    "cancelled": AnswerClass.ABANDONED,
    "error_body": AnswerClass.ERROR_BODY,
    "stream_error": AnswerClass.STREAM_ERROR,
    "truncated": AnswerClass.TRUNCATED,
}
DEFINITIONS = {
    AnswerClass.OK: "a complete answer with none of the problems below",
    AnswerClass.FAILED: "HTTP status >= 400, a transport failure or an unreadable body",
    AnswerClass.TIMEOUT: "no answer within the deadline, or silence after the headers",
    AnswerClass.ABANDONED: "the client disconnected before the answer was complete",
    AnswerClass.ERROR_BODY: "HTTP 200 whose body is an error object",
    AnswerClass.STREAM_ERROR: "an error event inside the stream",
    AnswerClass.TRUNCATED: "a stream closed before [DONE], or one that ended without a "
    "finish_reason",
    AnswerClass.EMPTY: "a successful answer with no text and no tool call",
    AnswerClass.DEGENERATE: "severely degenerate text (servegate.stats.degeneration.is_severe)",
    AnswerClass.INVALID_JSON: "response_format asked for JSON and the text does not parse",
    AnswerClass.INVALID_TOOL_ARGS: "a tool call whose arguments are not a JSON object",
}


@dataclass(frozen=True, slots=True)
class AnswerClassification:
    """The class and a one-line reason (empty for ok)."""

    kind: AnswerClass
    reason: str = ""
    # Every content problem found, in the order checked (the first is `kind`); empty for a failed
    # request, whose content is not read.
    problems: tuple[AnswerClass, ...] = ()

    @property
    def ok(self) -> bool:
        return self.kind is AnswerClass.OK

    def has(self, kind: AnswerClass) -> bool:
        """Whether the answer has this problem (its class, or another content problem)."""
        return kind is self.kind or kind in self.problems


def content_problems(
    *,
    text: str,
    tool_calls: int = 0,
    tool_args_valid: bool = True,
    json_asked: bool = False,
) -> list[tuple[AnswerClass, str]]:
    """Every problem of an answer's content, in order: empty, degenerate, invalid JSON, invalid
    tool-call arguments (an answer's text is read even when its stream was cut)."""
    found: list[tuple[AnswerClass, str]] = []
    if not text.strip() and not tool_calls:
        found.append((AnswerClass.EMPTY, "no text and no tool call"))
    if text:
        severe = is_severe(degeneration_metrics(text))
        if severe is not None:
            found.append((AnswerClass.DEGENERATE, severe))
    if json_asked and not is_json(text):
        found.append((AnswerClass.INVALID_JSON, "the answer does not parse as JSON"))
    if not tool_args_valid:
        found.append((AnswerClass.INVALID_TOOL_ARGS, "tool-call arguments are not a JSON object"))
    return found


def classify_answer(
    *,
    error: str | None,
    error_message: str = "",
    text: str = "",
    tool_calls: int = 0,
    tool_args_valid: bool = True,
    finish_reason: str | None = None,
    streamed: bool = False,
    json_asked: bool = False,
) -> AnswerClassification:
    """Classify one answer. `error` is the request's error category (None: the request
    succeeded as far as the transport and the parser are concerned)."""
    if error is not None:
        return AnswerClassification(_ERROR_CLASSES.get(error, AnswerClass.FAILED), error_message)
    found = content_problems(
        text=text, tool_calls=tool_calls, tool_args_valid=tool_args_valid, json_asked=json_asked
    )
    if streamed and finish_reason is None:
        found.insert(0, (AnswerClass.TRUNCATED, "stream ended without a finish_reason"))
    if not found:
        return AnswerClassification(AnswerClass.OK)
    kind, reason = found[0]
    return AnswerClassification(kind, reason, tuple(k for k, _ in found))


def classify_completion(
    completion: Completion, *, streamed: bool, json_asked: bool = False
) -> AnswerClassification:
    """`classify_answer` of a Completion as an endpoint returned it."""
    error = completion.error
    return classify_answer(
        error=None if error is None else error.category.value,
        error_message="" if error is None else error.message,
        text=completion.text,
        tool_calls=len(completion.tool_calls),
        tool_args_valid=all(call.arguments_valid for call in completion.tool_calls),
        finish_reason=completion.finish_reason,
        streamed=streamed,
        json_asked=json_asked,
    )


def degenerate_relative(text: str, reference: str) -> tuple[str, str] | None:
    """(kind, why) when `text` is severely degenerate where `reference` is not — a severe kind
    of its own, or punctuation soup where the reference wrote words — else None."""
    mine, theirs = degeneration_metrics(text), degeneration_metrics(reference)
    if is_severe(theirs):
        return None
    found = severe_kind(mine)
    if found is not None:
        return found
    soup = punctuation_soup(mine, theirs)
    return None if soup is None else (SOUP, soup)


def same_answer(a: Completion, b: Completion) -> bool:
    """Exact match: the same text and the same tool calls (name and arguments, in order)."""
    calls_a = [(t.name, t.arguments) for t in a.tool_calls]
    calls_b = [(t.name, t.arguments) for t in b.tool_calls]
    return a.text == b.text and calls_a == calls_b
