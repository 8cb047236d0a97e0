"""The assembler's quick path for plain content chunks gives what its general path gives, and
event JSON is read with exactly json.loads' values, whatever decoder reads it first."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servegate.endpoints.assembly import StreamAssembler
from servegate.endpoints.errors import ErrorCategory, FaultError
from servegate.endpoints.sse import SSEEvent, SSEParser
from servegate.endpoints.timing import TimingRecorder


def assemble(chunks: list[object]) -> tuple[StreamAssembler, TimingRecorder]:
    recorder = TimingRecorder()
    assembler = StreamAssembler(recorder, chat=True)
    for i, chunk in enumerate(chunks):
        assembler.add(SSEEvent(data=json.dumps(chunk), index=i, arrival_ns=1000 + i))
    return assembler, recorder


def plain(content: str, model: object) -> dict[str, object]:
    """The usual token chunk: the quick path takes it."""
    choice = {"index": 0, "delta": {"content": content}, "logprobs": None, "finish_reason": None}
    return {"object": "chat.completion.chunk", "model": model, "choices": [choice]}


def detour(content: str, model: object) -> dict[str, object]:
    """The same chunk with a delta key that means nothing: the general path takes it."""
    chunk = plain(content, model)
    choice = chunk["choices"][0]  # type: ignore[index]
    choice["delta"] = {"content": content, "role": None}
    return chunk


@settings(max_examples=200, deadline=None)
@given(
    contents=st.lists(st.text(max_size=6), min_size=1, max_size=12),
    model=st.one_of(st.none(), st.text(max_size=4), st.integers()),
)
def test_plain_content_chunks_come_out_as_the_general_path_reads_them(
    contents: list[str], model: object
) -> None:
    quick, quick_timing = assemble([plain(c, model) for c in contents])
    general, general_timing = assemble([detour(c, model) for c in contents])
    assert quick.draft == general.draft
    assert quick_timing.chunk_ns == general_timing.chunk_ns
    assert quick_timing.chunk_tokens == general_timing.chunk_tokens
    # an empty content string carries no token, so starts no TTFT
    assert len(quick_timing.chunk_ns) == sum(1 for c in contents if c)


def test_a_chunk_with_several_logprob_entries_counts_as_that_many_tokens_through_the_parser() -> (
    None
):
    entry = {"token": "a", "logprob": -0.1, "top_logprobs": []}
    choice = {"index": 0, "delta": {"content": "aaaa"}, "logprobs": {"content": [entry] * 4}}
    body = b"".join(
        b"data: " + json.dumps({"choices": [choice]}).encode() + b"\n\n" for _ in range(3)
    )
    recorder = TimingRecorder()
    assembler = StreamAssembler(recorder, chat=True)
    for event in SSEParser().feed(body + b"data: [DONE]\n\n", 7):
        assembler.add(event)
    assert recorder.chunk_tokens == [4, 4, 4]
    assert "chunk_tokens_estimated" not in assembler.draft.flags
    assert assembler.done


@pytest.mark.parametrize(
    "content_json",
    [
        r'"\u00e9\ud83d\ude00"',  # escaped BMP and astral characters
        r'"\ud800"',  # a lone surrogate: json.loads keeps it
        r'"tab\tquote\"slash\/"',
        '"\u00e9 raw utf-8"',
    ],
    ids=["escaped-unicode", "lone-surrogate", "escapes", "raw-utf8"],
)
def test_content_strings_are_read_as_json_loads_reads_them(content_json: str) -> None:
    data = (
        '{"choices":[{"index":0,"delta":{"content":'
        + content_json
        + '},"logprobs":null,"finish_reason":null}]}'
    )
    assembler = StreamAssembler(TimingRecorder(), chat=True)
    assembler.add(SSEEvent(data=data))
    assert assembler.draft.content == [json.loads(content_json)]


@pytest.mark.parametrize(
    ("usage_json", "completion_tokens"),
    [
        ('{"completion_tokens": 123456789012345678901234567890}', 123456789012345678901234567890),
        ('{"completion_tokens": NaN}', None),  # json.loads accepts NaN; not a count
        ('{"completion_tokens": 1e999}', None),
    ],
    ids=["integer-over-64-bits", "nan", "infinity"],
)
def test_numbers_outside_plain_json_are_read_as_json_loads_reads_them(
    usage_json: str, completion_tokens: int | None
) -> None:
    assembler = StreamAssembler(TimingRecorder(), chat=True)
    assembler.add(SSEEvent(data='{"choices": [], "usage": ' + usage_json + "}"))
    assert assembler.draft.usage is not None
    assert assembler.draft.usage.completion_tokens == completion_tokens


@pytest.mark.parametrize(
    ("data", "complete", "category", "message"),
    [
        ('{"choices": [', True, ErrorCategory.PARSE, 'event 3 is not JSON: {"choices": ['),
        ('{"choices": [', False, ErrorCategory.TRUNCATED, "stream ended inside event 3"),
        ("[1,]", True, ErrorCategory.PARSE, "event 3 is not JSON: [1,]"),
        ('"\x01"', True, ErrorCategory.PARSE, "event 3 is not JSON"),
        ("[1, 2]", True, ErrorCategory.SCHEMA, "event 3 is not a JSON object"),
    ],
    ids=["cut-json", "cut-at-end-of-stream", "trailing-comma", "control-character", "an-array"],
)
def test_malformed_events_are_reported_with_their_category_and_index(
    data: str, complete: bool, category: ErrorCategory, message: str
) -> None:
    assembler = StreamAssembler(TimingRecorder(), chat=True)
    with pytest.raises(FaultError) as raised:
        assembler.add(SSEEvent(data=data, index=3, complete=complete))
    assert raised.value.category is category
    assert message in raised.value.message
