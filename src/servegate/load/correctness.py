"""Correctness under load: every answer of a load run is checked, not only timed.

A server can keep its latency and return garbage once it batches; these checks count, per step,
what one-request-at-a-time probing would never see: degenerate text (`servegate.stats.
degeneration`), empty answers, HTTP 200 bodies or stream events that carry an error, finish
reasons, JSON that does not parse where `response_format` asked for JSON, and streamed
tool-call arguments that do not join into a JSON object. Run after the step, so checking costs
no client time while requests are in flight.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict

from servegate.endpoints.errors import ErrorCategory
from servegate.endpoints.text import excerpt
from servegate.endpoints.types import Completion
from servegate.load.workload import WorkItem
from servegate.stats.degeneration import degeneration_metrics, is_severe

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
    "tool_calls_invalid": "tool calls whose joined arguments are not a JSON object",
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
        """Answers counted by any failing check (an answer can fail several)."""
        return (
            self.degenerate
            + self.empty
            + self.error_body
            + self.json_invalid
            + self.tool_calls_invalid
        )


def _json_ok(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


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
        text = c.text
        if not text.strip() and not c.tool_calls:
            counts["empty"] += 1
            note(item, "empty answer", text)
        if text:
            severe = is_severe(degeneration_metrics(text))
            if severe is not None:
                counts["degenerate"] += 1
                note(item, f"degenerate: {severe}", text)
        if item.expects_json:
            counts["json_asked"] += 1
            if not _json_ok(text.strip()):
                counts["json_invalid"] += 1
                note(item, "response_format asked for JSON; the answer does not parse", text)
        for call in c.tool_calls:
            counts["tool_calls"] += 1
            if not call.arguments_valid:
                counts["tool_calls_invalid"] += 1
                note(item, f"tool call {call.name!r}: arguments not a JSON object", call.arguments)
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
