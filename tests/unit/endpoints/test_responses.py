"""The Responses API parsers on vLLM 0.32.0's real answers (tests/data/vllm, captured 2026-12-02)
and on the stream faults the chat streams are judged for."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servegate.endpoints.errors import ErrorCategory
from servegate.endpoints.responses import parse_response, parse_stream

DATA = Path(__file__).resolve().parents[2] / "data" / "vllm"
STREAM = (DATA / "responses-stream.sse").read_bytes()


def test_a_real_response_object_reads_like_a_chat_completion() -> None:
    answer = parse_response(json.loads((DATA / "responses.json").read_text())["response"])
    c = answer.completion
    assert c.ok
    assert c.content == "L'Étoile, la Marseillaise, la femme,"
    assert (answer.response_status, c.finish_reason) == ("incomplete", "length")
    assert c.usage is not None
    assert (c.usage.prompt_tokens, c.usage.completion_tokens, c.usage.total_tokens) == (37, 16, 53)
    assert c.usage.cached_tokens == 0
    assert c.model == "smollm2-135m-instruct"


def test_a_real_stream_gives_its_event_sequence_text_and_final_usage() -> None:
    answer = parse_stream(STREAM)
    expected = json.loads((DATA / "responses-stream-events.json").read_text())["event_sequence"]
    assert answer.events == tuple(expected)
    assert answer.events[:4] == (
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    )
    c = answer.completion
    assert c.ok
    assert c.content == "L'Étoile, la Marseillaise, la femme,"  # the non-streamed text
    assert c.usage is not None
    assert c.usage.completion_tokens == 16
    assert answer.response_status == "incomplete"
    # vLLM 0.32.0 ends an incomplete response with response.completed, not .incomplete.
    assert c.flags == ("terminal_event_status_mismatch",)


def _events() -> list[bytes]:
    return [e for e in STREAM.split(b"\n\n") if e.strip()]


@pytest.mark.parametrize(
    ("mutate", "category"),
    [
        (lambda ev: ev[:-1], ErrorCategory.TRUNCATED),  # no terminal event
        (lambda ev: [*ev[:5], b"data: {not json", *ev[5:]], ErrorCategory.PARSE),
        (lambda ev: [*ev[:5], b'data: {"type":"error","message":"boom"}', *ev[5:]],
         ErrorCategory.STREAM_ERROR),
        (lambda ev: [ev[0], ev[2], ev[1], *ev[3:]], ErrorCategory.SCHEMA),  # sequence order
    ],
    ids=["truncated", "not-json", "error-event", "out-of-order"],
)  # fmt: skip
def test_stream_faults_are_categorised_like_chat_streams(mutate: object, category: str) -> None:
    events = mutate(_events())  # type: ignore[operator]
    answer = parse_stream(b"\n\n".join(events) + b"\n\n")
    assert answer.completion.error is not None
    assert answer.completion.error.category == category
    # What streamed before the fault is kept.
    assert answer.events[0] == "response.created"


def test_a_stream_whose_deltas_disagree_with_its_final_object_is_flagged() -> None:
    events = _events()
    changed = [e.replace(b'"delta":"L', b'"delta":"X', 1) for e in events]
    answer = parse_stream(b"\n\n".join(changed) + b"\n\n")
    assert answer.completion.content is not None
    assert answer.completion.content.startswith("X")
    assert "stream_final_mismatch" in answer.completion.flags


def test_a_function_call_item_is_a_tool_call() -> None:
    obj = {
        "status": "completed",
        "output": [{"type": "function_call", "call_id": "c1", "name": "get_weather",
                    "arguments": '{"city": "Paris"}'}],
    }  # fmt: skip
    c = parse_response(obj).completion
    assert c.finish_reason == "tool_calls"
    assert [(t.name, t.arguments_valid) for t in c.tool_calls] == [("get_weather", True)]
    assert parse_response({"no": "output"}).completion.error is not None
