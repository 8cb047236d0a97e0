"""StreamAssembler on its own: logprob entries accumulate in order, in one list per stream."""

from __future__ import annotations

import json

import pytest

from servegate.endpoints.assembly import StreamAssembler
from servegate.endpoints.draft import RequestContext
from servegate.endpoints.errors import ErrorCategory, FaultError
from servegate.endpoints.sse import SSEEvent
from servegate.endpoints.timing import TimingRecorder
from servegate.endpoints.types import Timing


def event(obj: object, index: int) -> SSEEvent:
    return SSEEvent(data=json.dumps(obj), index=index, arrival_ns=1000 + index)


def chat_event(token: str, index: int) -> SSEEvent:
    entry = {"token": token, "logprob": -0.5, "top_logprobs": []}
    choice = {"index": 0, "delta": {"content": token}, "logprobs": {"content": [entry, entry]}}
    return event({"choices": [choice]}, index)


def text_event(token: str, index: int) -> SSEEvent:
    logprobs = {"tokens": [token], "token_logprobs": [-0.25], "top_logprobs": [None]}
    return event({"choices": [{"index": 0, "text": token, "logprobs": logprobs}]}, index)


def test_chat_logprobs_of_many_chunks_accumulate_in_order_in_one_list() -> None:
    assembler = StreamAssembler(TimingRecorder(), chat=True)
    assembler.add(chat_event("t0", 0))
    kept = assembler.draft.logprobs
    for i in range(1, 200):
        assembler.add(chat_event(f"t{i}", i))
    assert assembler.draft.logprobs is kept  # extended in place, never copied per chunk
    completion = assembler.draft.finish(RequestContext(), status=200, timing=Timing(sent_ns=0))
    assert [e.token for e in completion.logprobs or ()] == [f"t{i // 2}" for i in range(400)]
    assert assembler.draft.content is not None
    assert len(assembler.draft.content) == 200


def test_legacy_logprobs_of_many_chunks_accumulate_in_order_in_one_list() -> None:
    assembler = StreamAssembler(TimingRecorder(), chat=False)
    assembler.add(text_event("t0", 0))
    kept = assembler.draft.legacy
    for i in range(1, 200):
        assembler.add(text_event(f"t{i}", i))
    assert assembler.draft.legacy is kept
    completion = assembler.draft.finish(RequestContext(), status=200, timing=Timing(sent_ns=0))
    assert [(e.token, e.logprob) for e in completion.logprobs or ()] == [
        (f"t{i}", -0.25) for i in range(200)
    ]


def token(**delta: object) -> dict[str, object]:
    return {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta}]}


@pytest.mark.parametrize(
    ("chunk", "category", "token_chunks"),
    [
        (token(content="a"), None, 1),
        (token(content=""), None, 0),
        ({"choices": [{"index": 0, "delta": None}]}, None, 0),
        ({"choices": [{"index": 0, "delta": {}}]}, None, 0),
        ({"choices": [{"index": 0}]}, None, 0),
        (token(reasoning_content="r"), None, 1),
        (token(reasoning="r", reasoning_content=None), None, 1),
        ({**token(content="a"), "error": None}, None, 1),
        ({"choices": [], "usage": {"completion_tokens": 3}}, None, 0),
        ({"usage": {"completion_tokens": 3}}, None, 0),
        ({"error": {"message": "boom"}}, ErrorCategory.STREAM_ERROR, 0),
        ({"error": "boom", "choices": []}, ErrorCategory.STREAM_ERROR, 0),
        ({"object": "error", "message": "boom"}, ErrorCategory.STREAM_ERROR, 0),
        ([1, 2], ErrorCategory.SCHEMA, 0),
        ({"choices": [{"index": 0, "delta": ""}]}, ErrorCategory.SCHEMA, 0),
        ({"choices": [{"index": 0, "delta": []}]}, ErrorCategory.SCHEMA, 0),
        ({"choices": [{"index": 0, "delta": "x"}]}, ErrorCategory.SCHEMA, 0),
        ({"choices": ["x"]}, ErrorCategory.SCHEMA, 0),
        ({"model": "m"}, ErrorCategory.SCHEMA, 0),
    ],
    ids=[
        "content",
        "empty-content",
        "null-delta",
        "empty-delta",
        "no-delta",
        "reasoning-content",
        "reasoning",
        "null-error-key",
        "usage-only",
        "usage-without-choices",
        "error-object",
        "error-string",
        "object-error",
        "not-an-object",
        "empty-string-delta",
        "empty-list-delta",
        "string-delta",
        "choice-not-an-object",
        "no-choices",
    ],
)
def test_chunk_shapes_are_judged_the_same_on_the_quick_checks(
    chunk: object, category: ErrorCategory | None, token_chunks: int
) -> None:
    recorder = TimingRecorder()
    assembler = StreamAssembler(recorder, chat=True)
    if category is None:
        assembler.add(event(chunk, 0))
    else:
        with pytest.raises(FaultError) as raised:
            assembler.add(event(chunk, 0))
        assert raised.value.category is category
        assert "event 0" in raised.value.message
    assert len(recorder.chunk_ns) == token_chunks


@pytest.mark.parametrize(
    ("data", "category"),
    [
        (' {"choices": []}', None),
        ('{"choices": []} ', None),
        ('{"choices": []}\n', None),
        ('{"choices": []} x', ErrorCategory.PARSE),
        ('{"choices": []}{}', ErrorCategory.PARSE),
        ("\ufeff{}", ErrorCategory.PARSE),
        ("", ErrorCategory.PARSE),
        ("   ", ErrorCategory.PARSE),
        ("[DONE]x", ErrorCategory.PARSE),
        ('"text"', ErrorCategory.SCHEMA),
    ],
    ids=[
        "leading-space",
        "trailing-space",
        "trailing-newline",
        "trailing-garbage",
        "two-values",
        "bom",
        "empty",
        "blank",
        "done-with-suffix",
        "a-string",
    ],
)
def test_event_data_is_json_exactly_as_json_loads_reads_it(
    data: str, category: ErrorCategory | None
) -> None:
    assembler = StreamAssembler(TimingRecorder(), chat=True)
    if category is None:
        assembler.add(SSEEvent(data=data))
    else:
        with pytest.raises(FaultError) as raised:
            assembler.add(SSEEvent(data=data))
        assert raised.value.category is category
