"""The SSE parser on its own: WHATWG line and field rules, chunking independence, bounded memory."""

from __future__ import annotations

import itertools
import tracemalloc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servegate.endpoints.errors import ErrorCategory, FaultError
from servegate.endpoints.sse import SSEEvent, SSEFaultError, SSEParser


def parse(data: bytes, cuts: list[int] | None = None, **kw: int) -> list[SSEEvent]:
    parser = SSEParser(**kw)
    edges = [0, *sorted(set(cuts or [])), len(data)]
    events: list[SSEEvent] = []
    for start, end in itertools.pairwise(edges):
        events += parser.feed(data[start:end])
    return events + parser.close()


def payloads(events: list[SSEEvent]) -> list[tuple[str, str, bool]]:
    return [(e.data, e.event, e.complete) for e in events]


STREAM = (
    '\ufeffdata: {"content": " h\u00e9llo \u4e16\u754c \U0001f600"}\r\n\r\n'
    ": keepalive\r"
    "\r"
    "event: delta\n"
    "data:no-space\n"
    "data:  two-spaces\n"
    "id: 7\n"
    "\n"
    "data: line\u2028sep\u0085nel\r\n"
    "\r\n"
    "data: [DONE]\n\n"
).encode()


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=len(STREAM)), max_size=30))
def test_any_chunking_yields_the_same_events(cuts: list[int]) -> None:
    assert payloads(parse(STREAM, cuts)) == payloads(parse(STREAM))


def test_every_single_byte_split_yields_the_same_events() -> None:
    whole = payloads(parse(STREAM))
    for cut in range(len(STREAM) + 1):
        assert payloads(parse(STREAM, [cut])) == whole, cut


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.text(
            alphabet=st.characters(blacklist_categories=["Cs"], blacklist_characters="\r\n"),
            max_size=20,
        ),
        min_size=1,
        max_size=5,
    ),
    st.sampled_from([b"\n", b"\r", b"\r\n"]),
    st.data(),
)
def test_data_lines_round_trip_for_any_text_and_line_ending(
    lines: list[str], eol: bytes, data: st.DataObject
) -> None:
    frame = b"".join(b"data: " + line.encode() + eol for line in lines) + eol
    cuts = data.draw(st.lists(st.integers(0, len(frame)), max_size=8))
    assert [e.data for e in parse(frame, cuts)] == ["\n".join(lines)]


def test_whatwg_rules_on_the_reference_stream() -> None:
    assert payloads(parse(STREAM)) == [
        ('{"content": " h\u00e9llo \u4e16\u754c \U0001f600"}', "message", True),
        ("no-space\n two-spaces", "delta", True),
        ("line\u2028sep\u0085nel", "message", True),
        ("[DONE]", "message", True),
    ]


@pytest.mark.parametrize(
    ("frame", "expected"),
    [
        (b"data\n\n", [""]),
        (b"data:\n\n", [""]),
        (b"data:\ndata:\n\n", ["\n"]),
        (b"data: a\n\n\n\n", ["a"]),
        (b"event: x\n\n", []),
        (b"foo: bar\ndata: a\nretry: x1\nid: a\x00b\n\n", ["a"]),
        (b"data: a", ["a"]),
    ],
    ids=[
        "field-without-colon",
        "empty-value",
        "two-empty-lines-of-data",
        "extra-blank-lines",
        "event-without-data-is-not-dispatched",
        "unknown-fields-ignored",
        "unterminated-last-event",
    ],
)
def test_field_rules(frame: bytes, expected: list[str]) -> None:
    assert [e.data for e in parse(frame)] == expected


def test_unterminated_last_event_is_marked_incomplete() -> None:
    events = parse(b"data: a\n\ndata: b")
    assert [(e.data, e.complete) for e in events] == [("a", True), ("b", False)]


def test_id_with_nul_is_ignored_and_numeric_retry_is_kept() -> None:
    parser = SSEParser()
    parser.feed(b"id: 1\nid: a\x00b\nretry: 250\nretry: 1e3\ndata: x\n\n")
    assert (parser.last_event_id, parser.retry_ms) == ("1", 250)


def test_bom_is_stripped_only_at_the_start() -> None:
    events = parse(b"\xef\xbb\xbfdata: a\n\ndata: \xef\xbb\xbfb\n\n", [1, 2])
    assert [e.data for e in events] == ["a", "\ufeffb"]


def test_cr_at_chunk_end_and_lf_at_next_start_is_one_line_break() -> None:
    events = parse(b"data: a\r\ndata: b\r\n\r\n", [8, 17])
    assert [e.data for e in events] == ["a\nb"]


def test_invalid_utf8_raises_decode_with_events_before_it() -> None:
    parser = SSEParser()
    with pytest.raises(SSEFaultError) as raised:
        parser.feed(b"data: ok\n\ndata: \xff\xfe\n\n")
    assert raised.value.category is ErrorCategory.DECODE
    assert [e.data for e in raised.value.events] == ["ok"]


def test_event_over_the_cap_raises_too_large() -> None:
    parser = SSEParser(max_event_bytes=100)
    for _ in range(5):  # 5 lines of 17 bytes fit in 100
        parser.feed(b"data: " + b"x" * 10 + b"\n")
    with pytest.raises(FaultError) as raised:
        parser.feed(b"data: " + b"x" * 10 + b"\n")
    assert raised.value.category is ErrorCategory.TOO_LARGE


def test_line_that_never_ends_raises_too_large_before_buffering_past_the_cap() -> None:
    parser = SSEParser(max_event_bytes=1000)
    for _ in range(10):
        parser.feed(b"y" * 100)
    with pytest.raises(FaultError) as raised:
        parser.feed(b"y")
    assert raised.value.category is ErrorCategory.TOO_LARGE


def test_comments_are_dropped_as_they_come_and_memory_stays_flat() -> None:
    parser = SSEParser()
    parser.feed(b": warm-up\n\n")
    tracemalloc.start()
    try:
        for _ in range(20_000):
            assert parser.feed(b": ping\n\n") == []
        current, _peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert current < 64 * 1024
    assert parser.comments == 20_001


def test_a_long_comment_is_counted_without_being_stored() -> None:
    parser = SSEParser(max_event_bytes=10_000)
    for _ in range(50):
        parser.feed(b":" + b"z" * 100)
    parser.feed(b"\ndata: a\n\n")
    assert parser.comments == 1


def test_events_are_numbered_in_order_and_stamped_with_their_chunk() -> None:
    parser = SSEParser()
    first = parser.feed(b"data: a\n\ndata: b", arrival_ns=10)
    second = parser.feed(b"\n\n", arrival_ns=20)
    assert [(e.index, e.arrival_ns) for e in first + second] == [(0, 10), (1, 20)]
