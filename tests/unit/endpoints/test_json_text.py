"""One JSON rule: strict RFC 8259, so that every check agrees on the same answer.

Before, the answer classifier and tool-call arguments used plain `json.loads` (which accepts
NaN and Infinity) while the golden `is_json` check and the proxy's JSON metric refused them:
`answer_invalid_json` and `json_parse_failure` could contradict each other on one answer.
"""

import pytest

from servegate.endpoints.answers import AnswerClass, classify_answer
from servegate.endpoints.json_text import fenced, is_json, is_json_object, parse_json
from servegate.endpoints.types import ToolCall

NOT_JSON = ["NaN", '{"a": NaN}', '{"a": Infinity}', "[-Infinity]", "", "  ", "{'a': 1}", "{"]
JSON = ['{"a": 1}', "[1, 2.5e3]", '"text"', "null", '  {"a": [true, false]}\n']


@pytest.mark.parametrize("text", NOT_JSON, ids=repr)
def test_text_that_no_strict_parser_accepts_is_not_json(text: str) -> None:
    value, error = parse_json(text)
    assert value is None
    assert error
    assert not is_json(text)


@pytest.mark.parametrize("text", JSON, ids=repr)
def test_valid_json_parses(text: str) -> None:
    assert is_json(text)


def test_a_fence_is_accepted_only_when_the_caller_allows_it() -> None:
    text = 'Here:\n```json\n{"a": 1}\n```'
    assert not is_json(text)
    assert is_json(text, allow_fence=True)
    assert fenced(text) == '{"a": 1}\n'


@pytest.mark.parametrize("text", ['{"a": NaN}', "NaN", '{"x": Infinity}'], ids=repr)
def test_the_answer_classifier_and_the_json_check_agree_on_nan(text: str) -> None:
    seen = classify_answer(error=None, text=text, json_asked=True)
    assert seen.kind is AnswerClass.INVALID_JSON
    assert not is_json(text)


def test_tool_call_arguments_with_nan_are_not_a_json_object() -> None:
    assert not ToolCall(0, "c1", "f", '{"a": NaN}').arguments_valid
    assert not ToolCall(0, "c1", "f", "[1]").arguments_valid
    assert ToolCall(0, "c1", "f", '{"a": 1}').arguments_valid
    assert is_json_object('{"a": {"b": null}}')
