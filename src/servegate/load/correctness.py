"""Correctness under load: every answer of a load run is checked, not only timed.

A server can keep its latency and return garbage once it batches; these checks count, per step,
what one-request-at-a-time probing would never see: degenerate text (`servegate.stats.
degeneration`), empty answers, HTTP 200 bodies or stream events that carry an error, finish
reasons, JSON that does not parse where `response_format` asked for JSON, and streamed
tool-call arguments that do not join into a JSON object. Run after the step, so checking costs
no client time while requests are in flight.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict

from servegate.endpoints.answers import AnswerClass, classify_completion
from servegate.endpoints.errors import ErrorCategory
from servegate.endpoints.text import excerpt
from servegate.endpoints.types import Completion
from servegate.load.workload import WorkItem

__all__ = ["DEFINITIONS", "CorrectnessCounts", "Example", "check_responses"]

MAX_EXAMPLES = 5
ERROR_IN_BODY = frozenset({ErrorCategory.ERROR_BODY, ErrorCategory.STREAM_ERROR})

DEFINITIONS = {
    "checked": "successful responses checked",
    "degenerate": "answers with severe degeneration (a long run of one character or token, "
    "abnormal characters, repeated n-grams: servegate.stats.degeneration.is_severe)",
    "empty": "successful answers with no content and no tool call",
    "error_body": "HTTP 200 answers carrying an error object, or an error event in the stream",
    "json_invalid": "answers that do not parse as JSON where response_format asked for JSON",
    "tool_calls_invalid": "answers with a tool call whose joined arguments are not a JSON object",
    "finish_reasons": "successful answers by finish_reason ('none' when the server sent none)",
}


class Example(BaseModel):
    """One answer that failed a check, for the reader to see."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    request: str  # the work item's label
    problem: str
    excerpt: str


class CorrectnessCounts(BaseModel):
    """Per-step counts of answers that failed each check."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    definitions: dict[str, str]
    checked: int
    degenerate: int
    empty: int
    error_body: int
    json_asked: int
    json_invalid: int
    tool_calls: int
    tool_calls_invalid: int
    finish_reasons: dict[str, int]
    examples: tuple[Example, ...]

    @property
    def problems(self) -> int:
        """Answers that failed a check (each counted once, by its first problem:
        servegate.endpoints.answers.classify_answer)."""
        return (
            self.degenerate
            + self.empty
            + self.error_body
            + self.json_invalid
            + self.tool_calls_invalid
        )


_FIELD_OF = {
    AnswerClass.EMPTY: "empty",
    AnswerClass.DEGENERATE: "degenerate",
    AnswerClass.INVALID_JSON: "json_invalid",
    AnswerClass.INVALID_TOOL_ARGS: "tool_calls_invalid",
}


def check_responses(pairs: Sequence[tuple[WorkItem, Completion]]) -> CorrectnessCounts:
    """Check every answer; failed requests count only for error bodies (their other failures are
    the error rate's business)."""
    counts: Counter[str] = Counter()
    reasons: Counter[str] = Counter()
    examples: list[Example] = []

    def note(item: WorkItem, problem: str, text: str) -> None:
        if len(examples) < MAX_EXAMPLES:
            examples.append(Example(request=item.label, problem=problem, excerpt=excerpt(text)))

    for item, c in pairs:
        if c.error is not None:
            if c.error.category in ERROR_IN_BODY:
                counts["error_body"] += 1
                note(item, f"{c.error.category}: {c.error.message}", c.error.body_excerpt)
            continue
        counts["checked"] += 1
        reasons[c.finish_reason or "none"] += 1
        counts["json_asked"] += item.expects_json
        counts["tool_calls"] += len(c.tool_calls)
        # One classifier for every answer servegate reads (the gates, the proxy, the canary):
        # the first problem found is the answer's class.
        seen = classify_completion(c, streamed=False, json_asked=item.expects_json)
        field = _FIELD_OF.get(seen.kind)
        if field is not None:
            counts[field] += 1
            bad_call = next((t for t in c.tool_calls if not t.arguments_valid), None)
            shown = bad_call.arguments if field == "tool_calls_invalid" and bad_call else c.text
            note(item, f"{seen.kind}: {seen.reason}", shown)
    return CorrectnessCounts(
        definitions=DEFINITIONS,
        checked=counts["checked"],
        degenerate=counts["degenerate"],
        empty=counts["empty"],
        error_body=counts["error_body"],
        json_asked=counts["json_asked"],
        json_invalid=counts["json_invalid"],
        tool_calls=counts["tool_calls"],
        tool_calls_invalid=counts["tool_calls_invalid"],
        finish_reasons=dict(reasons),
        examples=tuple(examples),
    )
