"""BFCL-style matching of expected function calls against the tool calls a model made.

A call matches when the name is right, its arguments are a JSON object, every required parameter is
present, no unknown parameter appears, every argument has its schema type, and every constrained
argument takes one of its allowed values. Parallel calls match in any order.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from servegate.endpoints.json_text import parse_json
from servegate.endpoints.types import ToolCall as WireCall
from servegate.probes.assertions import ExpectedCall
from servegate.probes.schema import validate


def call_problems(expected: ExpectedCall, actual: WireCall) -> list[str]:
    """Why `actual` is not the expected call (empty when it matches)."""
    if actual.name != expected.name:
        return [f"called {actual.name!r}, expected {expected.name!r}"]
    args, error = parse_json(actual.arguments)
    if error is not None:
        return [f"{actual.name}: arguments are not valid JSON ({error}): {actual.arguments!r}"]
    if not isinstance(args, dict):
        return [f"{actual.name}: arguments are not a JSON object: {actual.arguments!r}"]
    return [f"{actual.name}: {p}" for p in _argument_problems(expected, args)]


def _argument_problems(expected: ExpectedCall, args: dict[str, Any]) -> list[str]:
    schema = expected.parameters or {}
    properties: dict[str, Any] = schema.get("properties") or {}
    required = schema.get("required") or []
    problems = [f"missing required argument {name!r}" for name in required if name not in args]
    for name, value in args.items():
        if properties and name not in properties:
            problems.append(f"unexpected argument {name!r}")
        elif name in properties:
            problems += validate(value, properties[name], name)
    for name, allowed in expected.arguments.items():
        if name not in args:
            # BFCL: an optional parameter may be left out when "" is among its allowed values.
            if "" not in allowed and name not in required:
                problems.append(f"missing argument {name!r}")
        elif not any(_same(args[name], a) for a in allowed):
            problems.append(f"argument {name!r} is {args[name]!r}, allowed {list(allowed)!r}")
    return problems


def _same(value: Any, allowed: Any) -> bool:
    if isinstance(value, str) and isinstance(allowed, str):
        return value.strip().casefold() == allowed.strip().casefold()
    if isinstance(value, bool) or isinstance(allowed, bool):
        return value is allowed
    return bool(value == allowed)


def match_calls(
    expected: Sequence[ExpectedCall], actual: Sequence[WireCall], *, exact: bool
) -> list[str]:
    """Problems with the set of calls, order-free (empty when every expected call is matched)."""
    if exact and len(actual) != len(expected):
        names = [c.name for c in actual]
        return [f"expected {len(expected)} call(s), got {len(actual)}: {names!r}"]
    ok = [[not call_problems(e, a) for a in actual] for e in expected]
    if _assign(ok, 0, set()):
        return []
    # Explain each expected call by its closest same-name candidate.
    problems: list[str] = []
    for i, e in enumerate(expected):
        if any(ok[i]):
            continue
        same_name = [a for a in actual if a.name == e.name]
        if not same_name:
            problems.append(f"no call to {e.name!r} among {[a.name for a in actual]!r}")
        else:
            explanations = [call_problems(e, a) for a in same_name]
            best: list[str] = min(explanations, key=len)
            problems += best
    return problems or ["the calls cannot be paired one-to-one with the expected calls"]


def _assign(ok: list[list[bool]], i: int, used: set[int]) -> bool:
    """Backtracking bipartite matching: a handful of calls, so exhaustive search is fine."""
    if i == len(ok):
        return True
    for j, fits in enumerate(ok[i]):
        if fits and j not in used and _assign(ok, i + 1, used | {j}):
            return True
    return False
