from collections.abc import Callable

from servegate.endpoints.errors import ErrorCategory
from servegate.endpoints.types import Completion, ToolCall
from servegate.load import WorkItem, check_responses

Make = Callable[..., Completion]
PLAIN = WorkItem(api="chat", body={}, label="plain")
JSON = WorkItem(api="chat", body={}, label="json", expects_json=True)


def test_fluent_answers_pass_every_check(completion: Make) -> None:
    counts = check_responses([(PLAIN, completion((1.0,), text="Paris is the capital."))])
    assert counts.checked == 1
    assert counts.problems == 0
    assert counts.finish_reasons == {"stop": 1}
    assert counts.examples == ()


def test_a_comma_run_is_degenerate_with_an_example(completion: Make) -> None:
    counts = check_responses([(PLAIN, completion((1.0,), text="," * 40))])
    assert counts.degenerate == 1
    assert counts.examples[0].request == "plain"
    assert "same character ','" in counts.examples[0].problem


def test_an_empty_answer_counts_unless_it_called_a_tool(completion: Make) -> None:
    call = ToolCall(index=0, id="c", name="f", arguments='{"x": 1}')
    counts = check_responses(
        [(PLAIN, completion(text="")), (PLAIN, completion(text="", tool_calls=(call,)))]
    )
    assert counts.empty == 1
    assert (counts.tool_calls, counts.tool_calls_invalid) == (1, 0)


def test_error_bodies_count_but_other_failures_are_the_error_rates_business(
    completion: Make,
) -> None:
    counts = check_responses(
        [
            (PLAIN, completion(error=ErrorCategory.ERROR_BODY)),
            (PLAIN, completion(error=ErrorCategory.STREAM_ERROR)),
            (PLAIN, completion(error=ErrorCategory.TIMEOUT)),
        ]
    )
    assert counts.error_body == 2
    assert counts.checked == 0


def test_json_is_checked_only_where_it_was_asked(completion: Make) -> None:
    counts = check_responses(
        [
            (JSON, completion(text=' {"a": 1} ')),
            (JSON, completion(text='{"a": 1')),
            (PLAIN, completion(text="not json at all")),
        ]
    )
    assert (counts.json_asked, counts.json_invalid) == (2, 1)


def test_tool_arguments_that_do_not_join_into_an_object_count(completion: Make) -> None:
    bad = ToolCall(index=0, id="c", name="f", arguments='{"city": "Par')
    counts = check_responses([(PLAIN, completion(text="", tool_calls=(bad,)))])
    assert counts.tool_calls_invalid == 1
    assert counts.empty == 0


def test_finish_reasons_are_recorded_with_none_for_missing(completion: Make) -> None:
    counts = check_responses(
        [
            (PLAIN, completion(finish="stop")),
            (PLAIN, completion(finish="length")),
            (PLAIN, completion(finish=None)),
        ]
    )
    assert counts.finish_reasons == {"stop": 1, "length": 1, "none": 1}


def test_examples_are_bounded(completion: Make) -> None:
    counts = check_responses([(PLAIN, completion(text="!" * 30)) for _ in range(20)])
    assert counts.degenerate == 20
    assert len(counts.examples) == 5
