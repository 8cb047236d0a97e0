"""The fused intake (`SSEParser.feed_into` handing line values to `StreamAssembler.add_data`)
against the general one (`feed`, one SSEEvent per event, `StreamAssembler.add`): the same
assembled answer, timing stamps, flags, faults and parser state, for random streams cut at random
places."""

from __future__ import annotations

import functools
import itertools
import json
from collections.abc import Callable
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from servegate.endpoints.assembly import StreamAssembler
from servegate.endpoints.errors import FaultError
from servegate.endpoints.sse import SSEEvent, SSEFaultError, SSEParser
from servegate.endpoints.timing import TimingRecorder

HEAD = '{"id":"c","object":"chat.completion.chunk","model":"m","choices":['
ROLE = HEAD + '{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}'
FINISH = HEAD + '{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}]}'
USAGE = '{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}'
LOGPROBS = HEAD + (
    '{"index":0,"delta":{"content":"ab"},"logprobs":{"content":['
    '{"token":"a","logprob":-0.5,"top_logprobs":[]},{"token":"b","logprob":-1,"top_logprobs":[]}'
    ']},"finish_reason":null}]}'
)


def content_event(text: str, model: object) -> str:
    choice = {"index": 0, "delta": {"content": text}, "logprobs": None, "finish_reason": None}
    return json.dumps({"object": "chat.completion.chunk", "model": model, "choices": [choice]})


CONTENT = st.builds(
    content_event,
    st.text(max_size=5),
    st.one_of(st.just("m"), st.none(), st.integers(0, 3)),
).map(str.encode)
ODD_DATA = st.sampled_from(
    [
        b"[DONE]",
        b"[DONE]x",
        ROLE.encode(),
        FINISH.encode(),
        USAGE.encode(),
        LOGPROBS.encode(),
        b'{"error":{"message":"boom"}}',
        b'{"object":"error","message":"bad"}',
        b'{"choices":[{"index":1,"delta":{"content":"x"}}]}',
        b'{"choices":[{"delta":{"content":"\\ud800"}}]}',  # a lone surrogate: json.loads only
        b'{"choices":[],"usage":{"completion_tokens":NaN}}',
        b'{"choices": [',
        b"not json",
        b"[1, 2]",
        b'"\xc3\xa9t\xc3\xa9"',
        b'{"choices":[{"index":0,"delta":{"content":"\xe4\xb8\x96"}}]}',  # raw UTF-8 content
        b'{"choices":[{"index":0,"delta":{"content":"\xff"}}]}',  # invalid UTF-8
        b'{"choices":[{"index":0,"delta":{"content":"a"}}]}\x00',
        b"",
    ]
)
# one line of a stream: mostly `data:` lines as servers send them, and everything else SSE allows
LINE = st.one_of(
    st.tuples(st.sampled_from([b"data: ", b"data:", b"data:  "]), st.one_of(CONTENT, ODD_DATA)).map(
        b"".join
    ),
    st.sampled_from([b"event: error", b"event: ping", b": ping", b":", b"id: 7", b"retry: 5"]),
    st.sampled_from([b"id: a\x00b", b"foo: bar", b"data", b"\xff", b"\xe2\x80\xa8"]),
)
EOL = st.sampled_from([b"\n\n", b"\n\n", b"\n\n", b"\n", b"\r\n\r\n", b"\r\n", b"\r", b"\n\n\n"])
STREAM = st.tuples(
    st.sampled_from([b"", b"", b"\xef\xbb\xbf"]),
    st.lists(st.tuples(LINE, EOL).map(b"".join), max_size=30).map(b"".join),
    st.sampled_from([b"", b"", b"data: [DONE]\n\n", b"data: {", b"data: x\n"]),
).map(b"".join)


def hand_over(parse: Callable[[], list[SSEEvent]], assembler: StreamAssembler) -> None:
    """The reference path: `feed` or `close` returns events (or raises SSEFaultError carrying
    the ones before the fault), and each goes to `add`."""
    try:
        events = parse()
    except SSEFaultError as exc:
        for event in exc.events:
            assembler.add(event)
        raise
    for event in events:
        assembler.add(event)


def outcome(data: bytes, cuts: list[int], limit: int, *, chat: bool, fused: bool) -> Any:
    """What reception would be left with: the assembled state, the fault, the parser's counters."""
    parser = SSEParser(max_event_bytes=limit)
    recorder = TimingRecorder(sent_ns=0)
    assembler = StreamAssembler(recorder, chat=chat)
    edges = [0, *sorted({c for c in cuts if 0 < c < len(data)}), len(data)]
    fault = None
    try:
        for arrival, (start, end) in enumerate(itertools.pairwise(edges), start=1):
            if not data:
                break
            if fused:
                parser.feed_into(data[start:end], arrival, assembler)
                continue
            hand_over(functools.partial(parser.feed, data[start:end], arrival), assembler)
        if fused:
            parser.close_into(len(edges), assembler)
        else:
            hand_over(functools.partial(parser.close, len(edges)), assembler)
    except FaultError as exc:
        fault = (type(exc), exc.category, exc.message)
    # reception reads the parser after the stream only when it ended cleanly or after [DONE]
    counters = (
        (parser.comments, parser.lines, parser.last_event_id, parser.retry_ms)
        if fault is None or assembler.done
        else None
    )
    timing = (recorder.chunk_ns, recorder.chunk_tokens, recorder.done_ns)
    return assembler.draft, assembler.done, assembler.events, timing, fault, counters


@settings(max_examples=200, deadline=None)
@given(
    STREAM,
    st.sampled_from([24, 80, 300, 16 * 1024 * 1024]),
    st.booleans(),
    st.lists(st.integers(0, 4000), max_size=12),
)
def test_fused_intake_matches_the_general_path_on_random_streams_and_cuts(
    stream: bytes, limit: int, chat: bool, cuts: list[int]
) -> None:
    cuts = [c % (len(stream) + 1) for c in cuts]
    general = outcome(stream, cuts, limit, chat=chat, fused=False)
    assert outcome(stream, cuts, limit, chat=chat, fused=True) == general
    assert outcome(stream, [], limit, chat=chat, fused=True) == outcome(
        stream, [], limit, chat=chat, fused=False
    )


class Recorder:
    """An EventSink that keeps what it was handed, by way."""

    def __init__(self) -> None:
        self.data: list[tuple[list[bytes | str], int, int]] = []
        self.events: list[SSEEvent] = []

    def add(self, event: SSEEvent) -> None:
        self.events.append(event)

    def add_data(self, payloads: list[bytes | str], first_index: int, arrival_ns: int) -> None:
        self.data.append((list(payloads), first_index, arrival_ns))


def test_an_openai_stream_goes_to_add_data_without_one_event_object_per_event() -> None:
    tokens = [content_event(f" t{i}", "m").encode() for i in range(3)]
    lines = [ROLE.encode(), *tokens, FINISH.encode(), USAGE.encode(), b"[DONE]"]
    body = b"".join(b"data: " + line + b"\n\n" for line in lines)
    cut = body.index(b"t0") + 1  # a read that ends inside the first token event
    sink = Recorder()
    parser = SSEParser()
    parser.feed_into(body[:cut], 5, sink)
    assert (sink.data, sink.events) == ([([lines[0]], 0, 5)], [])
    parser.feed_into(body[cut:], 6, sink)
    # the event left open by the last read is finished the general way, the rest go as data
    assert [(e.data, e.index, e.arrival_ns) for e in sink.events] == [(tokens[0].decode(), 1, 6)]
    assert sink.data[1:] == [(lines[2:], 2, 6)]
    assert parser.lines == 2 * len(lines)


def test_events_that_are_not_one_data_line_take_the_general_way_in_stream_order() -> None:
    sink = Recorder()
    SSEParser().feed_into(b"data: a\n\nevent: ping\ndata: b\n\ndata: c\n\n: ka\n", 1, sink)
    assert sink.data == [([b"a"], 0, 1)]
    assert [(e.data, e.event, e.index) for e in sink.events] == [
        ("b", "ping", 1),
        ("c", "message", 2),
    ]


# Pieces that change what a token chunk means, or break it, spliced in anywhere.
SPLICE = st.sampled_from(
    [
        b'"usage":null,',
        b'"error":null,',
        b'"us\\u0061ge":1,',  # key names spelt with escapes mean the same key
        b'"\\u0065rror":{"message":"e"},',
        b'"r\\u006fle":"assistant",',
        b'"object":"error",',
        b'"index":1,',
        b'"index":0.0,',
        b'"index":false,',
        b'"logprobs":{"content":[]},',
        b'"finish_reason":"stop",',
        b'"role":"assistant",',
        b'"content":"dup",',
        b'"content":7,',
        b'"model":["m"],',
        b'"x":NaN,',
        b'"x":"\\ud83d\\ude00",',
        b'"x":"\\ud800",',
        b'"x":1e999,',
        b'"x":[1,],',
        b"{",
        b"}",
        b"]",
        b",",
        b'"',
        b"\x01",
    ]
)


def one_event(payload: bytes, *, fused: bool) -> Any:
    recorder = TimingRecorder(sent_ns=0)
    assembler = StreamAssembler(recorder, chat=True)
    fault = None
    try:
        if fused:
            assembler.add_data([payload], 4, 9)
        else:
            assembler.add(SSEEvent(payload.decode("ascii"), index=4, arrival_ns=9))
    except FaultError as exc:
        fault = (exc.category, exc.message)
    return assembler.draft, assembler.events, recorder.chunk_ns, recorder.chunk_tokens, fault


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet="ab é", max_size=3), st.data())
def test_a_token_chunk_with_anything_spliced_in_is_read_as_the_general_path_reads_it(
    text: str, data: st.DataObject
) -> None:
    payload = content_event(text, "m").encode()  # json.dumps escapes é: ASCII
    for _ in range(data.draw(st.integers(1, 3))):
        where = data.draw(st.integers(0, len(payload)))
        payload = payload[:where] + data.draw(SPLICE) + payload[where:]
    assert one_event(payload, fused=True) == one_event(payload, fused=False)
