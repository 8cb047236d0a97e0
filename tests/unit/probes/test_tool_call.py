from typing import Any

import pytest

from servegate.endpoints.types import Completion, ToolCall
from servegate.probes import Probe, check_probe

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string"},
                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                    "days": {"type": "integer", "minimum": 1},
                },
                "required": ["city"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "get_time",
            "parameters": {"type": "object", "properties": {"timezone": {"type": "string"}}},
        },
    },
]


def probe(calls: list[dict[str, Any]], exact: bool = True) -> Probe:
    return Probe.model_validate(
        {
            "id": "tools",
            "category": "tools",
            "request": {"messages": [{"role": "user", "content": "weather?"}], "tools": TOOLS},
            "assert": [{"type": "tool-call", "calls": calls, "exact": exact}],
        }
    )


def made(*calls: tuple[str, str]) -> Completion:
    wire = tuple(ToolCall(i, f"c{i}", name, args) for i, (name, args) in enumerate(calls))
    return Completion(status=200, content=None, tool_calls=wire, finish_reason="tool_calls")


PARIS = {"name": "get_weather", "arguments": {"city": ["Paris", "Paris, France"]}}
TOKYO = {"name": "get_weather", "arguments": {"city": ["Tokyo"]}}


@pytest.mark.parametrize(
    ("expected", "completion", "passed", "reason"),
    [
        ([PARIS], made(("get_weather", '{"city": "Paris"}')), True, ""),
        ([PARIS], made(("get_weather", '{"city": " paris, france "}')), True, ""),
        ([PARIS], made(("get_time", '{"timezone": "UTC"}')), False, "no call to 'get_weather'"),
        ([PARIS], made(("get_weather", '{"city": "Lyon"}')), False, "'city' is 'Lyon'"),
        ([PARIS], made(("get_weather", "{}")), False, "missing required argument 'city'"),
        (
            [PARIS],
            made(("get_weather", '{"city": "Paris", "country": "FR"}')),
            False,
            "unexpected argument 'country'",
        ),
        (
            [PARIS],
            made(("get_weather", '{"city": "Paris", "days": "2"}')),
            False,
            "days: expected integer, got string",
        ),
        (
            [PARIS],
            made(("get_weather", '{"city": "Paris", "unit": "kelvin"}')),
            False,
            "'kelvin' is not one of",
        ),
        (
            [PARIS],
            made(("get_weather", '{"city": "Par')),
            False,
            """not valid JSON""",
        ),
        ([PARIS], made(("get_weather", '["Paris"]')), False, "not a JSON object"),
        ([PARIS], made(), False, "no tool call"),
        (
            [PARIS, TOKYO],
            made(("get_weather", '{"city": "Tokyo"}'), ("get_weather", '{"city": "Paris"}')),
            True,
            "",
        ),
        (
            [PARIS, TOKYO],
            made(("get_weather", '{"city": "Paris"}'), ("get_weather", '{"city": "Paris"}')),
            False,
            "'city' is 'Paris', allowed ['Tokyo']",
        ),
        ([PARIS], made(("get_weather", '{"city": "Paris"}'), ("get_time", "{}")), False, "got 2"),
        ([{"name": "get_time"}], made(("get_time", "{}")), True, ""),
    ],
    ids=[
        "single",
        "allowed-value-ignores-case-and-spaces",
        "wrong-function",
        "value-not-allowed",
        "required-missing",
        "unexpected-argument",
        "wrong-type",
        "outside-enum",
        "invalid-json",
        "arguments-not-an-object",
        "no-call",
        "parallel-in-any-order",
        "parallel-one-call-twice",
        "extra-call-when-exact",
        "name-only",
    ],
)
def test_tool_call_matching_bfcl_style(
    expected: list[dict[str, Any]], completion: Completion, passed: bool, reason: str
) -> None:
    outcome = check_probe(probe(expected), completion, None)
    assert outcome.passed is passed
    assert reason in " ".join(outcome.failures)


def test_invalid_arguments_are_quoted_raw_in_the_message() -> None:
    outcome = check_probe(probe([PARIS]), made(("get_weather", '{"city": "Par')), None)
    assert '\'{"city": "Par\'' in outcome.failures[0]


def test_extra_calls_are_allowed_when_not_exact() -> None:
    completion = made(("get_time", '{"timezone": "UTC"}'), ("get_weather", '{"city": "Paris"}'))
    assert check_probe(probe([PARIS], exact=False), completion, None).passed


def test_optional_argument_with_empty_allowed_value_may_be_left_out() -> None:
    spec = {"name": "get_weather", "arguments": {"city": ["Paris"], "unit": ["celsius", ""]}}
    assert check_probe(probe([spec]), made(("get_weather", '{"city": "Paris"}')), None).passed
    strict = {"name": "get_weather", "arguments": {"city": ["Paris"], "unit": ["celsius"]}}
    outcome = check_probe(probe([strict]), made(("get_weather", '{"city": "Paris"}')), None)
    assert "missing argument 'unit'" in outcome.failures[0]


def test_no_tool_call_assertion() -> None:
    p = Probe.model_validate(
        {
            "id": "none",
            "category": "tools",
            "request": {
                "messages": [{"role": "user", "content": "hi"}],
                "tools": TOOLS,
                "tool_choice": "none",
            },
            "assert": [{"type": "no-tool-call"}],
        }
    )
    assert check_probe(p, Completion(status=200, content="Sunny."), None).passed
    outcome = check_probe(p, made(("get_weather", '{"city": "Paris"}')), None)
    assert outcome.failures == ("no-tool-call: unexpected tool call(s) ['get_weather']",)


def test_the_schema_of_an_expected_call_comes_from_the_request_tools() -> None:
    assertion = probe([PARIS]).assertions[0]
    assert assertion.type == "tool-call"
    assert assertion.calls[0].parameters == TOOLS[0]["function"]["parameters"]


def test_a_call_to_a_function_missing_from_request_tools_is_a_suite_error() -> None:
    with pytest.raises(ValueError, match=r"'get_stock', which request\.tools does not define"):
        probe([{"name": "get_stock"}])
