"""Checks on the structure of a completion: JSON, schemas, tool calls, code, finish, usage."""

from __future__ import annotations

import ast

from servegate.endpoints.json_text import fenced, parse_json
from servegate.endpoints.text import quoted
from servegate.endpoints.types import Completion
from servegate.probes import assertions as a
from servegate.probes.outcome import AssertionOutcome
from servegate.probes.schema import validate
from servegate.probes.tool_match import match_calls


def is_json(x: a.IsJson, c: Completion, b: Completion | None) -> AssertionOutcome:
    _, error = parse_json(c.text, x.allow_fence)
    if error:
        return AssertionOutcome(x.type, False, f"not JSON ({error}): {quoted(c.content)}")
    return AssertionOutcome(x.type, True, "valid JSON")


def json_schema(x: a.JsonSchema, c: Completion, b: Completion | None) -> AssertionOutcome:
    value, error = parse_json(c.text, x.allow_fence)
    if error:
        return AssertionOutcome(x.type, False, f"not JSON ({error}): {quoted(c.content)}")
    problems = validate(value, x.json_schema)
    if problems:
        return AssertionOutcome(x.type, False, "; ".join(problems[:5]))
    return AssertionOutcome(x.type, True, "matches the schema")


def tool_call(x: a.ToolCall, c: Completion, b: Completion | None) -> AssertionOutcome:
    if not c.tool_calls:
        return AssertionOutcome(x.type, False, f"no tool call; content {quoted(c.content)}")
    problems = match_calls(x.calls, c.tool_calls, exact=x.exact)
    if problems:
        return AssertionOutcome(x.type, False, "; ".join(problems))
    return AssertionOutcome(x.type, True, f"{len(x.calls)} expected call(s) made")


def no_tool_call(x: a.NoToolCall, c: Completion, b: Completion | None) -> AssertionOutcome:
    names = [call.name for call in c.tool_calls]
    msg = f"unexpected tool call(s) {names!r}" if names else "no tool call"
    return AssertionOutcome(x.type, not names, msg)


def finish_reason(x: a.FinishReason, c: Completion, b: Completion | None) -> AssertionOutcome:
    ok = c.finish_reason in x.allowed
    want = " or ".join(x.allowed)
    return AssertionOutcome(x.type, ok, f"finish_reason {c.finish_reason!r}, expected {want}")


def python_parses(x: a.PythonParses, c: Completion, b: Completion | None) -> AssertionOutcome:
    code = fenced(c.text)
    code = c.text if code is None else code
    if not code.strip():
        return AssertionOutcome(x.type, False, "no code in the content")
    try:
        tree = ast.parse(code)
    except SyntaxError as exc:
        return AssertionOutcome(x.type, False, f"syntax error line {exc.lineno}: {exc.msg}")
    defined = {
        node.name
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
    }
    missing = [name for name in x.defines if name not in defined]
    if missing:
        return AssertionOutcome(x.type, False, f"parses, but does not define {missing!r}")
    return AssertionOutcome(x.type, True, "parses as Python")


def usage(x: a.UsageAccounting, c: Completion, b: Completion | None) -> AssertionOutcome:
    u = c.usage
    if u is None or u.prompt_tokens is None or u.completion_tokens is None:
        return AssertionOutcome(x.type, False, "usage not reported")
    problems = []
    if u.total_tokens is not None and u.total_tokens != u.prompt_tokens + u.completion_tokens:
        problems.append(
            f"total_tokens {u.total_tokens} != prompt {u.prompt_tokens} + "
            f"completion {u.completion_tokens}"
        )
    if u.prompt_tokens <= 0:
        problems.append(f"prompt_tokens is {u.prompt_tokens}")
    if c.text and u.completion_tokens <= 0:
        problems.append(f"completion_tokens is {u.completion_tokens} for a non-empty answer")
    if x.max_completion_tokens is not None and u.completion_tokens > x.max_completion_tokens:
        problems.append(
            f"completion_tokens {u.completion_tokens} > max_tokens {x.max_completion_tokens}"
        )
    if x.match_baseline_prompt_tokens and b is not None and b.usage is not None:
        want = b.usage.prompt_tokens
        if want is not None and want != u.prompt_tokens:
            problems.append(
                f"prompt_tokens {u.prompt_tokens}, baseline {want} (chat template drift?)"
            )
    if problems:
        return AssertionOutcome(x.type, False, "; ".join(problems))
    return AssertionOutcome(
        x.type, True, f"usage adds up ({u.prompt_tokens}+{u.completion_tokens})"
    )
