"""Tool-call delta merging: per index, inference only when unambiguous, never two calls in one."""

from __future__ import annotations

from typing import Any

import pytest

from servegate.endpoints.errors import ErrorCategory, FaultError
from servegate.endpoints.tool_calls import ToolCallMerger, message_tool_calls


def merged(*deltas: dict[str, Any]) -> list[tuple[int, str | None, str | None, str]]:
    merger = ToolCallMerger()
    for i, delta in enumerate(deltas):
        merger.add(delta, f"event {i}")
    return [(c.index, c.id, c.name, c.arguments) for c in merger.calls()]


def fn(**function: str) -> dict[str, Any]:
    return {"function": function}


def test_arguments_join_per_index_even_when_interleaved() -> None:
    assert merged(
        {"index": 0, "id": "a", **fn(name="f", arguments='{"x"')},
        {"index": 1, "id": "b", **fn(name="g", arguments='{"y"')},
        {"index": 0, **fn(arguments=": 1}")},
        {"index": 1, **fn(arguments=": 2}")},
    ) == [(0, "a", "f", '{"x": 1}'), (1, "b", "g", '{"y": 2}')]


def test_missing_index_continues_the_only_call() -> None:
    assert merged({"id": "a", **fn(name="f")}, fn(arguments="{}")) == [(0, "a", "f", "{}")]


def test_missing_index_with_a_known_id_goes_to_that_call() -> None:
    assert merged(
        {"id": "a", **fn(name="f")},
        {"id": "b", **fn(name="g")},
        {"id": "a", **fn(arguments="{}")},
    ) == [(0, "a", "f", "{}"), (1, "b", "g", "")]


def test_name_arriving_after_an_id_only_delta_names_that_call() -> None:
    assert merged({"id": "a"}, fn(name="f", arguments="{}")) == [(0, "a", "f", "{}")]


def test_new_name_without_index_or_id_starts_a_new_call() -> None:
    assert merged(fn(name="f", arguments="{}"), fn(name="g", arguments="{}")) == [
        (0, None, "f", "{}"),
        (1, None, "g", "{}"),
    ]


@pytest.mark.parametrize(
    "deltas",
    [
        [{"id": "a", **fn(name="f")}, {"id": "b", **fn(name="g")}, fn(arguments="{}")],
        [{"index": 0, "id": "a"}, {"index": 0, "id": "b"}],
        [{"index": 0, **fn(name="f")}, {"index": 0, **fn(name="g")}],
        [{"id": "a"}, {"id": "b"}, fn(name="f")],
    ],
    ids=["bare-fragment-two-calls", "second-id", "second-name", "name-two-unnamed"],
)
def test_ambiguous_deltas_raise_tool_index(deltas: list[dict[str, Any]]) -> None:
    with pytest.raises(FaultError) as raised:
        merged(*deltas)
    assert raised.value.category is ErrorCategory.TOOL_INDEX


@pytest.mark.parametrize(
    "delta",
    [{"index": -1}, {"index": "0"}, {"index": True}, "not-an-object", {"function": []}],
)
def test_malformed_delta_raises_schema(delta: Any) -> None:
    with pytest.raises(FaultError) as raised:
        merged(delta)
    assert raised.value.category is ErrorCategory.SCHEMA


def test_non_streamed_tool_calls_are_indexed_by_position() -> None:
    calls = message_tool_calls(
        [
            {"id": "a", "function": {"name": "f", "arguments": '{"x": 1}'}},
            {"id": "b", "function": {"name": "g", "arguments": "not json"}},
        ]
    )
    assert [(c.index, c.name, c.arguments_valid) for c in calls] == [
        (0, "f", True),
        (1, "g", False),
    ]
