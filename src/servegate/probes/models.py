"""A suite of probes as strict, frozen data: what to send and what to assert about the answer."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from servegate.probes.assertions import Assertion, ToolCall

CATEGORIES = (
    "canary",
    "arithmetic",
    "code",
    "multilingual",
    "degeneration",
    "eos",
    "stop",
    "long-output",
    "json",
    "tools",
    "refusal",
    "multi-turn",
    "usage",
)


def _tool_schemas(request: Any) -> dict[str, Any]:
    tools = request.get("tools") if isinstance(request, dict) else None
    schemas: dict[str, Any] = {}
    for tool in tools if isinstance(tools, list) else []:
        function = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(function, dict) and isinstance(function.get("name"), str):
            schemas[function["name"]] = function.get("parameters") or {}
    return schemas


class Probe(BaseModel):
    """One request and what its answer must satisfy. Temperature defaults to 0 (greedy)."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9._-]*$")
    category: str = Field(min_length=1)
    api: Literal["chat", "completions"] = "chat"
    request: dict[str, Any]
    assertions: tuple[Assertion, ...] = Field(alias="assert", min_length=1)
    severity: Literal["critical", "major", "minor"] = "major"
    description: str = ""

    @model_validator(mode="before")
    @classmethod
    def _fill_defaults(cls, data: Any) -> Any:
        """Greedy by default, and tool-call assertions take their schemas from request.tools."""
        if not isinstance(data, dict) or not isinstance(data.get("request"), dict):
            return data
        data = {**data, "request": {"temperature": 0, **data["request"]}}
        schemas = _tool_schemas(data["request"])
        key = "assert" if "assert" in data else "assertions"
        items = data.get(key)
        if isinstance(items, list | tuple):
            data[key] = [_with_parameters(item, schemas) for item in items]
        return data

    @field_validator("request")
    @classmethod
    def _request_shape(cls, value: dict[str, Any]) -> dict[str, Any]:
        if "model" in value:
            raise ValueError("leave out 'model': servegate sets it for each endpoint")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> Probe:
        needed = "messages" if self.api == "chat" else "prompt"
        if needed not in self.request:
            raise ValueError(f"a {self.api} probe needs request.{needed}")
        for assertion in self.assertions:
            if isinstance(assertion, ToolCall):
                for call in assertion.calls:
                    if call.parameters is None:
                        raise ValueError(
                            f"tool-call expects {call.name!r}, which request.tools does not define"
                        )
        return self


def _with_parameters(item: Any, schemas: dict[str, Any]) -> Any:
    if not isinstance(item, dict) or item.get("type") != "tool-call":
        return item
    calls = item.get("calls")
    if not isinstance(calls, list | tuple):
        return item
    filled = []
    for call in calls:
        if isinstance(call, dict) and "parameters" not in call and call.get("name") in schemas:
            call = {**call, "parameters": schemas[call["name"]]}
        filled.append(call)
    return {**item, "calls": filled}


class Suite(BaseModel):
    """A named, versioned list of probes with unique ids (an empty suite judges nothing)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1)
    version: int = Field(ge=1)
    description: str = ""
    probes: tuple[Probe, ...]

    @field_validator("probes")
    @classmethod
    def _unique_ids(cls, probes: tuple[Probe, ...]) -> tuple[Probe, ...]:
        seen: dict[str, int] = {}
        for i, probe in enumerate(probes):
            if probe.id in seen:
                raise ValueError(
                    f"duplicate probe id {probe.id!r} (probes[{seen[probe.id]}], probes[{i}])"
                )
            seen[probe.id] = i
        return probes

    def categories(self) -> tuple[str, ...]:
        """Categories in first-seen order."""
        return tuple(dict.fromkeys(p.category for p in self.probes))

    def total_max_tokens(self) -> int:
        """Sum of max_tokens over the probes: the cost of one pass over one endpoint."""
        return sum(int(p.request.get("max_tokens", 0)) for p in self.probes)
