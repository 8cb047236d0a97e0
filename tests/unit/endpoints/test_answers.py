"""The one answer classifier: its class, every content problem it found, and the two relative
rules (degenerate where the reference is not; exact match of text and tool calls)."""

from servegate.endpoints.answers import (
    AnswerClass,
    classify_answer,
    classify_completion,
    degenerate_relative,
    same_answer,
)
from servegate.endpoints.types import Completion, ToolCall

COMMAS = ",,,,,,,,,,,,,,,,,,,,,,,,"


def test_the_first_problem_is_the_class_and_every_content_problem_is_kept() -> None:
    seen = classify_answer(error=None, text=COMMAS, json_asked=True, finish_reason="stop")
    assert seen.kind is AnswerClass.DEGENERATE
    assert seen.problems == (AnswerClass.DEGENERATE, AnswerClass.INVALID_JSON)
    assert seen.has(AnswerClass.INVALID_JSON)
    assert not seen.has(AnswerClass.EMPTY)


def test_a_cut_stream_is_truncated_and_its_text_is_still_read() -> None:
    seen = classify_answer(error=None, text=COMMAS, streamed=True, finish_reason=None)
    assert seen.kind is AnswerClass.TRUNCATED
    assert seen.has(AnswerClass.DEGENERATE)


def test_a_failed_request_has_no_content_problems() -> None:
    seen = classify_answer(error="server", error_message="HTTP 500", text=COMMAS)
    assert seen.kind is AnswerClass.FAILED
    assert seen.problems == ()


def test_a_completion_is_classified_as_its_fields_say() -> None:
    bad_args = ToolCall(0, "c", "get_weather", '{"city": NaN}')
    c = Completion(status=200, content="", tool_calls=(bad_args,), finish_reason="tool_calls")
    seen = classify_completion(c, streamed=False)
    assert seen.kind is AnswerClass.INVALID_TOOL_ARGS
    empty = classify_completion(
        Completion(status=200, content=" ", finish_reason="stop"), streamed=False
    )
    assert empty.kind is AnswerClass.EMPTY


def test_degenerate_only_where_the_reference_is_not() -> None:
    found = degenerate_relative(COMMAS, "The capital of France is Paris.")
    assert found is not None
    assert degenerate_relative(COMMAS, COMMAS) is None
    assert degenerate_relative("Paris.", "The capital of France is Paris.") is None


def test_exact_match_compares_the_tool_calls_too() -> None:
    a = Completion(status=200, content="", tool_calls=(ToolCall(0, "1", "f", '{"x": 1}'),))
    b = Completion(status=200, content="", tool_calls=(ToolCall(0, "1", "f", '{"x": 2}'),))
    assert a.text == b.text
    assert not same_answer(a, b)
    assert same_answer(a, a)
