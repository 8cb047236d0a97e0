"""Non-streamed bodies and completion drafts: logprob shapes, echo split, usage, error shapes."""

from __future__ import annotations

import base64
import struct
from typing import Any

import pytest

from servegate.endpoints.body import completion_draft, decode_json, embeddings_of
from servegate.endpoints.draft import RequestContext
from servegate.endpoints.errors import ErrorCategory, FaultError
from servegate.endpoints.types import Completion, Timing, TokenLogprob

TIMING = Timing(sent_ns=0)


def finish(obj: Any, *, chat: bool, **request: Any) -> Completion:
    ctx = RequestContext.of(request, streaming=False)
    return completion_draft(obj, chat=chat).finish(ctx, status=200, timing=TIMING)


def legacy_body(usage: dict[str, int] | None) -> dict[str, Any]:
    logprobs = {
        "tokens": ["Hello", " world", "!"],
        "token_logprobs": [None, -1.25, -0.5],
        "top_logprobs": [None, {" world": -1.25, " there": -2.0}, {"!": -0.5}],
        "text_offset": [0, 5, 11],
    }
    body: dict[str, Any] = {"choices": [{"text": "Hello world!", "logprobs": logprobs}]}
    if usage is not None:
        body["usage"] = usage
    return body


def test_legacy_logprobs_with_echo_split_prompt_by_usage() -> None:
    result = finish(
        legacy_body({"prompt_tokens": 2, "completion_tokens": 1}),
        chat=False,
        prompt="Hello world",
        echo=True,
    )
    assert result.prompt_logprobs == (
        None,
        TokenLogprob(" world", -1.25, ((" world", -1.25), (" there", -2.0))),
    )
    assert result.logprobs == (TokenLogprob("!", -0.5, (("!", -0.5),)),)


def test_legacy_logprobs_with_echo_split_prompt_by_text_offset_without_usage() -> None:
    result = finish(legacy_body(None), chat=False, prompt="Hello world", echo=True)
    assert result.prompt_logprobs is not None
    assert len(result.prompt_logprobs) == 2
    assert [e.token for e in result.logprobs or ()] == ["!"]


def test_echo_that_cannot_be_split_is_flagged() -> None:
    result = finish(legacy_body(None), chat=False, prompt=[1, 2], echo=True)
    assert "echo_split_unknown" in result.flags
    assert result.prompt_logprobs is None


def test_legacy_logprobs_without_echo_are_all_generated() -> None:
    result = finish(legacy_body({"prompt_tokens": 2, "completion_tokens": 3}), chat=False)
    assert [e.token for e in result.logprobs or ()] == [" world", "!"]
    assert result.prompt_logprobs is None


def test_chat_logprobs_keep_top_alternatives_in_order() -> None:
    body = {
        "choices": [
            {
                "message": {"content": "OK"},
                "finish_reason": "stop",
                "logprobs": {
                    "content": [
                        {
                            "token": "OK",
                            "logprob": -0.01,
                            "top_logprobs": [
                                {"token": "OK", "logprob": -0.01},
                                {"token": "Ok", "logprob": -4.6},
                            ],
                        }
                    ]
                },
            }
        ]
    }
    result = finish(body, chat=True)
    assert result.logprobs == (TokenLogprob("OK", -0.01, (("OK", -0.01), ("Ok", -4.6))),)


def test_reasoning_is_kept_apart_from_content() -> None:
    body = {"choices": [{"message": {"content": "4", "reasoning_content": "2+2"}}]}
    result = finish(body, chat=True)
    assert (result.content, result.reasoning) == ("4", "2+2")


def test_usage_with_cached_tokens_and_missing_usage_flag() -> None:
    body: dict[str, Any] = {"choices": [{"message": {"content": "x"}}]}
    assert "usage_missing" in finish(body, chat=True).flags
    body["usage"] = {
        "prompt_tokens": 9,
        "completion_tokens": 1,
        "total_tokens": 10,
        "prompt_tokens_details": {"cached_tokens": 8},
    }
    result = finish(body, chat=True)
    assert result.usage is not None
    assert result.usage.cached_tokens == 8
    assert "usage_missing" not in result.flags


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        ({"error": {"message": "m"}}, ErrorCategory.ERROR_BODY),
        ({"object": "error", "message": "m"}, ErrorCategory.ERROR_BODY),
        ({"error": "m"}, ErrorCategory.ERROR_BODY),
        ([], ErrorCategory.SCHEMA),
        ({"choices": []}, ErrorCategory.SCHEMA),
        ({"choices": [{"message": {"content": 5}}]}, ErrorCategory.SCHEMA),
        ({"choices": [{"message": "hi"}]}, ErrorCategory.SCHEMA),
    ],
    ids=["error-object", "object-error", "error-string", "list", "no-choices", "int", "str-msg"],
)
def test_bad_bodies_fail_with_their_category(obj: Any, expected: ErrorCategory) -> None:
    with pytest.raises(FaultError) as raised:
        completion_draft(obj, chat=True)
    assert raised.value.category is expected


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"\xff{}", ErrorCategory.DECODE),
        (b"<html>", ErrorCategory.PARSE),
        (b"", ErrorCategory.PARSE),
    ],
)
def test_undecodable_bodies_fail_as_decode_or_parse(data: bytes, expected: ErrorCategory) -> None:
    with pytest.raises(FaultError) as raised:
        decode_json(data)
    assert raised.value.category is expected


def test_body_with_bom_and_null_error_is_a_completion() -> None:
    obj = decode_json(b'\xef\xbb\xbf{"error": null, "choices": [{"message": {"content": "x"}}]}')
    assert finish(obj, chat=True).content == "x"


def test_base64_embeddings_decode_as_little_endian_float32() -> None:
    packed = base64.b64encode(struct.pack("<3f", 0.5, -1.0, 2.0)).decode()
    vectors, _ = embeddings_of({"data": [{"index": 0, "embedding": packed}]}, {"input": "a"})
    assert vectors == ((0.5, -1.0, 2.0),)


@pytest.mark.parametrize(
    ("request_body", "count"),
    [({"input": "a"}, 1), ({"input": [1, 2, 3]}, 1), ({"input": ["a", "b"]}, 2)],
    ids=["string", "token-ids", "list-of-strings"],
)
def test_embedding_count_follows_the_input_shape(request_body: dict[str, Any], count: int) -> None:
    data = [{"index": i, "embedding": [1.0]} for i in range(count)]
    vectors, _ = embeddings_of({"data": data}, request_body)
    assert len(vectors) == count
    with pytest.raises(FaultError):
        embeddings_of({"data": [*data, {"index": count, "embedding": [1.0]}]}, request_body)
