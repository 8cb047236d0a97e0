"""The parser's LF-only fast path against its general path: same events, state and faults.

A stream with LF line ends takes the fast path wherever a chunk starts on a line boundary; the same
stream with CRLF line ends is, by the WHATWG rules, the same stream, and every chunk of it takes
the general path. Random streams, random chunkings of each, and the outcomes must agree.
"""

from __future__ import annotations

import itertools
from dataclasses import astuple

from hypothesis import given, settings
from hypothesis import strategies as st

from servegate.endpoints.errors import FaultError
from servegate.endpoints.sse import SSEParser

TEXT = st.text(
    alphabet=st.characters(blacklist_categories=["Cs"], blacklist_characters="\r\n"), max_size=12
)
VALUE = st.one_of(
    TEXT.map(str.encode),
    st.sampled_from([b"\xff", b"\xe4\xb8", b"ok\xc3", b"\x00", b"\xef\xbb\xbf", b" \xe2\x80\xa8"]),
)
NAME = st.sampled_from([b"data", b"data", b"data", b"event", b"id", b"retry", b"foo", b"", b":"])
LINE = st.one_of(
    st.just(b""),  # a blank line ends an event
    st.tuples(NAME, st.sampled_from([b":", b": ", b":  ", b""]), VALUE).map(b"".join),
)
STREAM = st.tuples(
    st.sampled_from([b"", b"\xef\xbb\xbf"]), st.lists(LINE, max_size=25), st.booleans()
).map(lambda p: p[0] + b"".join(line + b"\n" for line in p[1]) + (b"data: x" if p[2] else b""))


def outcome(data: bytes, cuts: list[int], limit: int) -> tuple[object, ...]:
    parser = SSEParser(max_event_bytes=limit)
    edges = [0, *sorted(set(cuts)), len(data)]
    events = []
    fault: tuple[object, ...] | None = None
    try:
        for start, end in itertools.pairwise(edges):
            events += parser.feed(data[start:end], arrival_ns=1)
        events += parser.close(arrival_ns=1)
    except FaultError as exc:
        events += getattr(exc, "events", [])
        fault = (exc.category, exc.message)
    state = (parser.last_event_id, parser.retry_ms, parser.comments, parser.lines)
    return [astuple(e) for e in events], fault, state


@settings(max_examples=400, deadline=None)
@given(STREAM, st.one_of(st.integers(6, 60), st.just(4096)), st.data())
def test_lf_fast_path_matches_the_general_path_on_random_streams(
    stream: bytes, limit: int, data: st.DataObject
) -> None:
    crlf = stream.replace(b"\n", b"\r\n")
    lf_cuts = data.draw(st.lists(st.integers(0, len(stream)), max_size=10))
    crlf_cuts = data.draw(st.lists(st.integers(0, len(crlf)), max_size=10))
    fast = outcome(stream, lf_cuts, limit)
    assert fast == outcome(crlf, crlf_cuts, limit)
    assert fast == outcome(stream, [], limit)  # one chunk: the fast path for the whole stream
