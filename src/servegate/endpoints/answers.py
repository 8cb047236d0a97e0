"""One classification of one answer: ok, or the first thing wrong with it.

The gates, the proxy and the canary read an answer the same way: a request that failed (its
error category from the endpoints' parser), an HTTP 200 that carries an error, a stream that
breaks or ends without a finish reason, an empty answer, degenerate text (`degeneration.
is_severe`), text that does not parse where JSON was asked, tool-call arguments that do not
parse. Plain values in, so any layer can call it; the first problem found is the class.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from servegate.endpoints.errors import HUNG
from servegate.endpoints.json_text import is_json
from servegate.stats.degeneration import degeneration_metrics, is_severe

__all__ = ["AnswerClass", "AnswerClassification", "classify_answer"]


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

    @property
    def ok(self) -> bool:
        return self.kind is AnswerClass.OK


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
    if streamed and finish_reason is None:
        return AnswerClassification(AnswerClass.TRUNCATED, "stream ended without a finish_reason")
    if not text.strip() and not tool_calls:
        return AnswerClassification(AnswerClass.EMPTY, "no text and no tool call")
    if text:
        severe = is_severe(degeneration_metrics(text))
        if severe is not None:
            return AnswerClassification(AnswerClass.DEGENERATE, severe)
    if json_asked and not is_json(text):
        return AnswerClassification(AnswerClass.INVALID_JSON, "the answer does not parse as JSON")
    if not tool_args_valid:
        return AnswerClassification(
            AnswerClass.INVALID_TOOL_ARGS, "tool-call arguments are not a JSON object"
        )
    return AnswerClassification(AnswerClass.OK)
