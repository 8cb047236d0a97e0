"""A mirrored pair compared on plain data: exchanges as the proxy records them."""

from __future__ import annotations

import json
from typing import Any

import pytest

from servegate.proxy.comparison import compare_pair
from servegate.proxy.content import request_metrics
from servegate.proxy.exchange import CHAT_PATH, EMBEDDINGS_PATH, Exchange, completion_of

MS = 1_000_000


def _body(content: str | None, *, tool_args: str | None = None, finish: str = "stop") -> Exchange:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_args is not None:
        message["tool_calls"] = [
            {"id": "c", "type": "function", "function": {"name": "f", "arguments": tool_args}}
        ]
    data = json.dumps(
        {"choices": [{"index": 0, "message": message, "finish_reason": finish}],
         "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}}
    ).encode()  # fmt: skip
    exchange = Exchange(sent_ns=0, status=200, headers={"content-type": "application/json"})
    exchange.keep(data, 40 * MS, 1 << 20)
    exchange.done_ns = 40 * MS
    return exchange


def _stream(pieces: list[str], gap_ms: int = 10) -> Exchange:
    exchange = Exchange(sent_ns=0, status=200, headers={"content-type": "text/event-stream"})
    at = 0
    for piece in pieces:
        at += gap_ms * MS
        chunk = {"choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}]}
        exchange.keep(f"data: {json.dumps(chunk)}\n\n".encode(), at, 1 << 20)
    at += gap_ms * MS
    end = {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
    exchange.keep(f"data: {json.dumps(end)}\n\ndata: [DONE]\n\n".encode(), at, 1 << 20)
    exchange.done_ns = at
    return exchange


GREEDY = {"messages": [{"role": "user", "content": "hi"}], "temperature": 0}


def test_equal_greedy_answers_are_an_exact_match() -> None:
    c = compare_pair(CHAT_PATH, GREEDY, _body("The answer is 4"), _body("The answer is 4"))
    assert (c.exact_match, c.first_divergence_char, c.candidate_degenerate) == (True, None, None)


def test_a_comma_run_is_a_degenerate_mismatch_at_its_first_character() -> None:
    c = compare_pair(CHAT_PATH, GREEDY, _body("The answer is 4"), _body(",,,,,,,,,,,,,,,,"))
    assert c.exact_match is False
    assert c.first_divergence_char == 0
    assert c.candidate_degenerate is not None
    assert "','" in c.candidate_degenerate
    assert c.candidate_metrics["garbage"] == 1.0
    assert c.candidate_metrics["repeated_token_ratio"] == 0.0  # one "word" of commas
    assert c.primary_metrics["garbage"] == 0.0


def test_sampled_requests_are_not_judged_for_equality() -> None:
    request = {**GREEDY, "temperature": 0.8}
    c = compare_pair(CHAT_PATH, request, _body("a"), _body("b"))
    assert (c.greedy, c.exact_match, c.first_divergence_char) == (False, None, None)


def test_a_stream_is_read_with_its_token_timing() -> None:
    exchange = _stream(["Hel", "lo"])
    completion = completion_of(exchange, CHAT_PATH, {**GREEDY, "stream": True})
    assert completion is not None
    assert (completion.content, completion.finish_reason) == ("Hello", "stop")
    metrics = request_metrics(exchange, completion, {**GREEDY, "stream": True})
    assert metrics["ttft_ms"] == pytest.approx(10.0)
    assert metrics["e2el_ms"] == pytest.approx(30.0)


def test_a_stream_without_done_is_the_candidates_failure() -> None:
    broken = _stream(["Hel", "lo"])
    broken.chunks[-1] = broken.chunks[-1].replace(b"data: [DONE]\n\n", b"")
    c = compare_pair(CHAT_PATH, {**GREEDY, "stream": True}, _stream(["Hello"]), broken)
    assert (c.primary_ok, c.candidate_ok, c.exact_match) == (True, False, None)


def test_json_and_tool_call_parse_failures_are_measured_only_where_asked() -> None:
    json_request = {**GREEDY, "response_format": {"type": "json_object"}}
    c = compare_pair(CHAT_PATH, json_request, _body('{"city": "Paris"}'), _body('{"city": '))
    assert (c.primary_metrics["json_parse_failure"], c.candidate_metrics["json_parse_failure"]) == (
        0.0,
        1.0,
    )
    tools = compare_pair(
        CHAT_PATH, GREEDY, _body(None, tool_args='{"a": 1}'), _body(None, tool_args='{"a": ')
    )
    assert tools.primary_metrics["tool_call_parse_failure"] == 0.0
    assert tools.candidate_metrics["tool_call_parse_failure"] == 1.0
    assert "json_parse_failure" not in tools.primary_metrics  # not asked for JSON: not measured
    assert tools.primary_metrics["empty_output"] == 0.0  # a tool call is an answer


def test_a_candidate_that_timed_out_is_a_failed_side_with_its_timeout_counted() -> None:
    hung = Exchange(sent_ns=0, error="no answer", timed_out=True, done_ns=3000 * MS)
    c = compare_pair(CHAT_PATH, GREEDY, _body("4"), hung)
    assert c.candidate_ok is False
    assert c.candidate_metrics == {"error": 1.0, "timeout": 1.0, "answer_timeout": 1.0}


def test_embeddings_are_compared_by_cosine() -> None:
    def emb(vector: list[float]) -> Exchange:
        e = Exchange(sent_ns=0, status=200, headers={"content-type": "application/json"})
        e.keep(json.dumps({"data": [{"index": 0, "embedding": vector}]}).encode(), 1, 1 << 20)
        e.done_ns = 1
        return e

    c = compare_pair(EMBEDDINGS_PATH, {"input": "x"}, emb([1.0, 0.0]), emb([1.0, 1.0]))
    assert c.min_embedding_cosine == pytest.approx(2**-0.5)


def test_a_primary_answer_already_read_gives_the_same_comparison_as_reading_it_again() -> None:
    request = {**GREEDY, "stream": True}
    primary, candidate = _stream(["The answer", " is 4"]), _stream(["The answer", " is 5"])
    read = completion_of(primary, CHAT_PATH, request)
    assert read is not None
    reused = compare_pair(CHAT_PATH, request, primary, candidate, primary_completion=read)
    fresh = compare_pair(CHAT_PATH, request, primary, candidate)
    assert reused == fresh
    assert (fresh.exact_match, fresh.first_divergence_char) == (False, 14)
    # and it is what is compared (not read again): handing in the candidate's own answer matches
    same = completion_of(candidate, CHAT_PATH, request)
    assert compare_pair(CHAT_PATH, request, primary, candidate, primary_completion=same).exact_match
