"""StreamAssembler on its own: logprob entries accumulate in order, in one list per stream."""

from __future__ import annotations

import json

from servegate.endpoints.assembly import StreamAssembler
from servegate.endpoints.draft import RequestContext
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
