"""Streamed tool-call deltas joined per `index`; two calls are never merged into one.

A delta without `index` is placed only when that is unambiguous: a known `id` names its call, a
new `id` or a new function name starts the next call, and a bare argument fragment continues the
only open call. Anything else is FAIL(tool_index), because guessing could splice two calls.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from servegate.endpoints.errors import ErrorCategory, FaultError
from servegate.endpoints.types import ToolCall


@dataclass(slots=True)
class _Call:
    id: str | None = None
    name: str | None = None
    arguments: list[str] = field(default_factory=list)


class ToolCallMerger:
    """Accumulates `delta.tool_calls` entries from a stream."""

    def __init__(self) -> None:
        self._calls: dict[int, _Call] = {}
        self._by_id: dict[str, int] = {}

    def add(self, delta: Any, where: str) -> None:
        if not isinstance(delta, dict):
            raise FaultError(ErrorCategory.SCHEMA, f"tool-call delta at {where} is not an object")
        function = delta.get("function")
        function = {} if function is None else function
        if not isinstance(function, dict):
            raise FaultError(ErrorCategory.SCHEMA, f"tool-call function at {where} not an object")
        call_id = delta.get("id") if isinstance(delta.get("id"), str) else None
        name = function.get("name") if isinstance(function.get("name"), str) else None
        index = self._index(delta.get("index"), call_id, name, where)
        call = self._calls.setdefault(index, _Call())
        if call_id:
            if call.id is not None and call.id != call_id:
                raise FaultError(
                    ErrorCategory.TOOL_INDEX,
                    f"tool call index {index} at {where} carries a second id; refusing to merge",
                )
            call.id = call_id
            self._by_id[call_id] = index
        if name:
            if call.name is not None and call.name != name:
                raise FaultError(
                    ErrorCategory.TOOL_INDEX,
                    f"tool call index {index} at {where} names a second function",
                )
            call.name = name
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            call.arguments.append(arguments)
        elif arguments is not None:
            raise FaultError(ErrorCategory.SCHEMA, f"tool-call arguments at {where} not a string")

    def _index(self, raw: Any, call_id: str | None, name: str | None, where: str) -> int:
        if isinstance(raw, int) and not isinstance(raw, bool) and raw >= 0:
            return raw
        if raw is not None:
            raise FaultError(ErrorCategory.SCHEMA, f"tool-call index at {where} is {raw!r}")
        if call_id and call_id in self._by_id:
            return self._by_id[call_id]
        if not self._calls:
            return 0
        if call_id:
            return max(self._calls) + 1
        unnamed = [i for i, c in self._calls.items() if c.name is None]
        if name and not unnamed:
            return max(self._calls) + 1
        if name and len(unnamed) == 1:
            return unnamed[0]
        if not name and len(self._calls) == 1:
            return next(iter(self._calls))
        raise FaultError(
            ErrorCategory.TOOL_INDEX,
            f"tool-call delta without index at {where} fits {len(self._calls)} open calls",
        )

    def calls(self) -> tuple[ToolCall, ...]:
        return tuple(
            ToolCall(index=i, id=c.id, name=c.name, arguments="".join(c.arguments))
            for i, c in sorted(self._calls.items())
        )


def message_tool_calls(raw: Any) -> tuple[ToolCall, ...]:
    """Tool calls of a non-streamed `message.tool_calls` list, indexed by position."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise FaultError(ErrorCategory.SCHEMA, "message.tool_calls is not a list")
    calls = []
    for i, item in enumerate(raw):
        function = item.get("function") if isinstance(item, dict) else None
        if not isinstance(function, dict):
            raise FaultError(ErrorCategory.SCHEMA, f"tool_calls[{i}] has no function object")
        arguments = function.get("arguments")
        if isinstance(arguments, dict):  # some servers send an object instead of a JSON string
            import json

            arguments = json.dumps(arguments)
        name, call_id = function.get("name"), item.get("id")
        calls.append(
            ToolCall(
                index=i,
                id=call_id if isinstance(call_id, str) else None,
                name=name if isinstance(name, str) else None,
                arguments=arguments if isinstance(arguments, str) else "",
            )
        )
    return tuple(calls)
