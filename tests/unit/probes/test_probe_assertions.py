from typing import Any

import pytest
from pydantic import TypeAdapter

from servegate.endpoints.errors import ErrorCategory, RequestError
from servegate.endpoints.types import Completion, ToolCall, Usage
from servegate.probes import Assertion, Probe, check, check_probe

ASSERTION: TypeAdapter[Assertion] = TypeAdapter(Assertion)


def said(content: str | None, **kw: Any) -> Completion:
    return Completion(status=200, content=content, finish_reason=kw.pop("finish", "stop"), **kw)


def judge(spec: dict[str, Any], candidate: Completion, baseline: Completion | None = None) -> bool:
    return check(ASSERTION.validate_python(spec), candidate, baseline).passed


CASES = [
    ({"type": "equals", "value": "OK"}, said(" OK\n"), True),
    ({"type": "equals", "value": "OK"}, said("!!!!!!!!"), False),
    ({"type": "equals", "value": "OK", "ignore_case": True}, said("ok"), True),
    ({"type": "equals", "value": "OK", "strip": False}, said(" OK"), False),
    ({"type": "contains", "value": "Paris"}, said("The capital is Paris."), True),
    ({"type": "contains", "value": "Paris"}, said("paris"), False),
    ({"type": "contains", "value": "Paris", "ignore_case": True}, said("PARIS"), True),
    ({"type": "not-contains", "value": "5"}, said("1, 2, 3, 4, "), True),
    ({"type": "not-contains", "value": "5"}, said("4, 5, 6"), False),
    ({"type": "regex", "pattern": r"(?<!\d)42(?!\d)"}, said("It is 42."), True),
    ({"type": "regex", "pattern": r"(?<!\d)42(?!\d)"}, said("It is 420."), False),
    ({"type": "regex", "pattern": "OK[.!]?", "full": True}, said("OK!"), True),
    ({"type": "regex", "pattern": "OK[.!]?", "full": True}, said("OK, sure"), False),
    ({"type": "max-length", "chars": 5}, said("12345"), True),
    ({"type": "max-length", "chars": 5}, said("123456"), False),
    ({"type": "min-length", "chars": 3}, said("abc"), True),
    ({"type": "min-length", "chars": 3}, said(None), False),
    ({"type": "finish-reason", "value": "stop"}, said("x"), True),
    ({"type": "finish-reason", "value": "stop"}, said("x", finish="length"), False),
    (
        {"type": "finish-reason", "value": ["stop", "tool_calls"]},
        said(None, finish="tool_calls"),
        True,
    ),
    ({"type": "finish-reason", "value": "stop"}, said("x", finish=None), False),
    ({"type": "is-json"}, said('{"a": 1}'), True),
    ({"type": "is-json"}, said('{"a": 1'), False),
    ({"type": "is-json"}, said("NaN"), False),
    ({"type": "is-json"}, said("```json\n[1, 2]\n```"), False),
    ({"type": "is-json", "allow_fence": True}, said("```json\n[1, 2]\n```"), True),
    ({"type": "is-json"}, said(""), False),
    ({"type": "python-parses"}, said("def add(a, b):\n    return a + b\n"), True),
    (
        {"type": "python-parses", "defines": ["add"]},
        said("```python\ndef add(a, b):\n    return a + b\n```"),
        True,
    ),
    (
        {"type": "python-parses", "defines": ["add"]},
        said("def plus(a, b):\n    return a + b"),
        False,
    ),
    ({"type": "python-parses"}, said("def add(a, b)\n    return a + b"), False),
    ({"type": "python-parses"}, said("```python\ndef f():\n    return 1\n"), True),
    ({"type": "python-parses"}, said("   "), False),
    ({"type": "refusal"}, said("I’m sorry, but I can’t help with that."), True),
    ({"type": "refusal"}, said("Sure! Step 1: ..."), False),
    ({"type": "refusal", "phrases": ["nope"]}, said("Nope."), True),
    ({"type": "no-refusal"}, said("Use `kill <pid>` or `pkill python`."), True),
    ({"type": "no-refusal"}, said("I cannot assist with that."), False),
    ({"type": "no-degeneration"}, said("Once upon a time a robot painted the sea."), True),
    ({"type": "no-degeneration"}, said("!!!!!!!!!!!!!!!!!!!!"), False),
    ({"type": "no-degeneration"}, said(",,,,,,,,,,,,,,,,"), False),
    ({"type": "no-degeneration"}, said("the the the the the the the the the the"), False),
    ({"type": "no-degeneration"}, said(""), False),
    ({"type": "no-degeneration", "allow_empty": True}, said(""), True),
]
CASE_IDS = [
    "equals-stripped",
    "equals-bangs",
    "equals-ignore-case",
    "equals-unstripped",
    "contains",
    "contains-case-sensitive",
    "contains-ignore-case",
    "not-contains-absent",
    "not-contains-present",
    "regex-found",
    "regex-not-a-whole-number",
    "regex-full",
    "regex-full-with-extra",
    "max-length-at-limit",
    "max-length-over",
    "min-length-at-limit",
    "min-length-null-content",
    "finish-stop",
    "finish-length-not-stop",
    "finish-one-of",
    "finish-missing",
    "json-object",
    "json-truncated",
    "json-nan-refused",
    "json-fenced-refused",
    "json-fenced-allowed",
    "json-empty",
    "python-plain",
    "python-fenced-defines",
    "python-missing-definition",
    "python-syntax-error",
    "python-unclosed-fence",
    "python-blank",
    "refusal-curly-apostrophe",
    "refusal-compliance",
    "refusal-custom-phrases",
    "no-refusal-answer",
    "no-refusal-refused",
    "degeneration-fluent",
    "degeneration-bangs",
    "degeneration-commas",
    "degeneration-token-loop",
    "degeneration-empty-without-baseline",
    "degeneration-empty-allowed",
]


@pytest.mark.parametrize(("spec", "candidate", "expected"), CASES, ids=CASE_IDS)
def test_assertion_judges_the_candidate(
    spec: dict[str, Any], candidate: Completion, expected: bool
) -> None:
    assert judge(spec, candidate) is expected


@pytest.mark.parametrize(
    ("spec", "text", "expected"),
    [
        ({"type": "language", "language": "zh"}, "天空是蓝色的。", True),
        ({"type": "language", "language": "zh"}, "The sky is blue.", False),
        ({"type": "language", "language": "ja"}, "富士山は静岡県と山梨県にあります。", True),
        ({"type": "language", "language": "ja"}, "天空是蓝色的。", False),
        ({"type": "language", "language": "fr"}, "La capitale de l'Italie est Rome.", True),
        ({"type": "language", "language": "fr"}, "The capital of Italy is Rome.", False),
        ({"type": "language", "language": "ko"}, "하늘은 파랗다", True),
        ({"type": "script", "script": "han", "min_share": 0.5}, "早上好", True),
        ({"type": "script", "script": "han", "min_share": 0.5}, "Good morning 早上好", False),
        ({"type": "script", "script": "han"}, "1234 !!!", False),
        ({"type": "script", "script": "cyrillic"}, "Привет, мир", True),
    ],
    ids=[
        "zh-chinese",
        "zh-english",
        "ja-with-kana",
        "ja-chinese-has-no-kana",
        "fr-french",
        "fr-english",
        "ko-hangul",
        "han-share-high",
        "han-share-low",
        "han-no-letters",
        "cyrillic",
    ],
)
def test_language_and_script_by_share_of_letters(
    spec: dict[str, Any], text: str, expected: bool
) -> None:
    assert judge(spec, said(text)) is expected


def test_empty_output_fails_degeneration_only_when_the_baseline_had_text() -> None:
    spec = {"type": "no-degeneration"}
    assert not judge(spec, said(""), said("A story."))
    assert judge(spec, said(""), said(""))


def test_empty_content_with_a_tool_call_is_not_empty_output() -> None:
    call = ToolCall(index=0, id="c1", name="f", arguments="{}")
    assert judge({"type": "no-degeneration"}, said(None, tool_calls=(call,)))


@pytest.mark.parametrize(
    ("spec", "candidate", "baseline", "expected"),
    [
        ({"type": "matches-baseline"}, said("OK"), said("OK"), True),
        ({"type": "matches-baseline"}, said("OK."), said("OK"), False),
        ({"type": "matches-baseline"}, said(""), said(None), False),
        (
            {"type": "matches-baseline", "ignore": ["punctuation", "case"]},
            said("ok."),
            said("OK"),
            True,
        ),
        ({"type": "matches-baseline", "ignore": ["whitespace"]}, said("a  b\n"), said("a b"), True),
        ({"type": "matches-baseline", "ignore": ["whitespace"]}, said("a b"), said("a c"), False),
    ],
    ids=[
        "exact-same",
        "exact-punctuation-differs",
        "empty-string-is-not-null",
        "normalised-case-and-punctuation",
        "normalised-whitespace",
        "normalised-still-different",
    ],
)
def test_matches_baseline(
    spec: dict[str, Any], candidate: Completion, baseline: Completion, expected: bool
) -> None:
    assert judge(spec, candidate, baseline) is expected


def test_matching_tool_calls_ignores_order_and_argument_key_order() -> None:
    a = ToolCall(0, "1", "get_weather", '{"city": "Paris", "unit": "celsius"}')
    b = ToolCall(1, "2", "get_time", '{"timezone": "Asia/Tokyo"}')
    moved = ToolCall(0, "x", "get_weather", '{"unit": "celsius", "city": "Paris"}')
    spec = {"type": "matches-baseline", "field": "tool_calls"}
    assert judge(spec, said(None, tool_calls=(b, moved)), said(None, tool_calls=(a, b)))
    assert not judge(spec, said(None, tool_calls=(b,)), said(None, tool_calls=(a, b)))


def test_matches_baseline_is_not_applicable_without_a_usable_baseline() -> None:
    spec = ASSERTION.validate_python({"type": "matches-baseline"})
    alone = check(spec, said("OK"), None)
    failed = Completion(status=None, error=RequestError(ErrorCategory.TIMEOUT, "no headers"))
    against_failure = check(spec, said("OK"), failed)
    assert alone.passed
    assert not alone.applicable
    assert against_failure.passed
    assert not against_failure.applicable
    assert "timeout" in against_failure.message


def test_a_failed_request_fails_every_assertion_with_its_category() -> None:
    failed = Completion(status=500, error=RequestError(ErrorCategory.SERVER, "boom", status=500))
    probe = Probe.model_validate(
        {
            "id": "p",
            "category": "canary",
            "request": {"messages": [{"role": "user", "content": "hi"}]},
            "assert": [{"type": "no-refusal"}, {"type": "max-length", "chars": 10}],
        }
    )
    outcome = check_probe(probe, failed, None)
    assert not outcome.passed
    assert len(outcome.failures) == 2
    assert all("request failed (server)" in f for f in outcome.failures)


def test_probe_outcome_lists_only_failed_assertions() -> None:
    probe = Probe.model_validate(
        {
            "id": "canary-ok",
            "category": "canary",
            "request": {"messages": [{"role": "user", "content": "Reply with exactly: OK"}]},
            "assert": [{"type": "equals", "value": "OK"}, {"type": "max-length", "chars": 40}],
        }
    )
    outcome = check_probe(probe, said("!!!!"), None)
    assert outcome.probe == "canary-ok"
    assert outcome.failures == ("equals: expected 'OK', got '!!!!'",)


USAGE_CASES = [
    ({}, Usage(10, 2, 12), None, True),
    ({}, None, None, False),
    ({}, Usage(10, 2, 13), None, False),
    ({}, Usage(10, 2, 12), Usage(11, 2, 13), False),
    ({"match_baseline_prompt_tokens": False}, Usage(10, 2, 12), Usage(11, 2, 13), True),
    ({"max_completion_tokens": 8}, Usage(10, 9, 19), None, False),
    ({}, Usage(10, 0, 10), None, False),
]


@pytest.mark.parametrize(
    ("options", "usage", "baseline_usage", "expected"),
    USAGE_CASES,
    ids=[
        "adds-up",
        "missing",
        "total-wrong",
        "template-drift",
        "drift-not-checked",
        "over-max-tokens",
        "zero-completion-tokens-for-text",
    ],
)
def test_usage_accounting(
    options: dict[str, Any], usage: Usage | None, baseline_usage: Usage | None, expected: bool
) -> None:
    baseline = said("OK", usage=baseline_usage) if baseline_usage else None
    assert judge({"type": "usage", **options}, said("OK", usage=usage), baseline) is expected


SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0}},
    "required": ["name", "age"],
    "additionalProperties": False,
}


@pytest.mark.parametrize(
    ("text", "expected", "reason"),
    [
        ('{"name": "Ana", "age": 30}', True, ""),
        ('{"name": "Ana"}', False, "missing required key 'age'"),
        ('{"name": "Ana", "age": "30"}', False, "expected integer, got string"),
        ('{"name": "Ana", "age": true}', False, "expected integer, got boolean"),
        ('{"name": "Ana", "age": -1}', False, "is not >= 0"),
        ('{"name": "Ana", "age": 30, "x": 1}', False, "unexpected key 'x'"),
        ("[]", False, "expected object, got array"),
        ('{"name": "Ana", "age": 30.0}', True, ""),
    ],
    ids=[
        "valid",
        "missing",
        "string-age",
        "bool-age",
        "below-minimum",
        "extra-key",
        "array",
        "integral-float",
    ],
)
def test_json_schema_assertion(text: str, expected: bool, reason: str) -> None:
    spec = ASSERTION.validate_python({"type": "json-schema", "schema": SCHEMA})
    outcome = check(spec, said(text), None)
    assert outcome.passed is expected
    assert reason in outcome.message


def test_unsupported_schema_keywords_are_refused_when_loading() -> None:
    with pytest.raises(ValueError, match=r"\$\.properties\.a: oneOf"):
        ASSERTION.validate_python(
            {"type": "json-schema", "schema": {"properties": {"a": {"oneOf": []}}}}
        )


def test_a_bad_regular_expression_is_refused_when_loading() -> None:
    with pytest.raises(ValueError, match="invalid regular expression"):
        ASSERTION.validate_python({"type": "regex", "pattern": "("})
