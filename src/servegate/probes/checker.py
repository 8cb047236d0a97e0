"""Judging completions: one check per assertion type, chosen from an explicit table."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from servegate.endpoints.types import Completion
from servegate.probes import assertions as a
from servegate.probes import content, structure
from servegate.probes.outcome import AssertionOutcome, ProbeOutcome

if TYPE_CHECKING:
    from servegate.probes.models import Probe

CheckFn = Callable[[Any, Completion, Completion | None], AssertionOutcome]

CHECKS: dict[type[Any], CheckFn] = {
    a.Equals: content.equals,
    a.Contains: content.contains,
    a.NotContains: content.not_contains,
    a.Regex: content.regex,
    a.MaxLength: content.max_length,
    a.MinLength: content.min_length,
    a.Script: content.script,
    a.Language: content.language,
    a.Refusal: content.refusal,
    a.NoRefusal: content.no_refusal,
    a.NoDegeneration: content.no_degeneration,
    a.MatchesBaseline: content.matches_baseline,
    a.IsJson: structure.is_json,
    a.JsonSchema: structure.json_schema,
    a.ToolCall: structure.tool_call,
    a.NoToolCall: structure.no_tool_call,
    a.FinishReason: structure.finish_reason,
    a.PythonParses: structure.python_parses,
    a.UsageAccounting: structure.usage,
}


def check(
    assertion: a.Assertion, candidate: Completion, baseline: Completion | None
) -> AssertionOutcome:
    """Judge one completion against one assertion; a failed request fails every assertion."""
    if candidate.error is not None:
        err = candidate.error
        return AssertionOutcome(
            assertion.type, False, f"request failed ({err.category}): {err.message}"
        )
    return CHECKS[type(assertion)](assertion, candidate, baseline)


def check_probe(probe: Probe, candidate: Completion, baseline: Completion | None) -> ProbeOutcome:
    """Judge one completion against every assertion of a probe."""
    return ProbeOutcome(probe.id, tuple(check(x, candidate, baseline) for x in probe.assertions))
