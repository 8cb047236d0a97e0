"""Fuzz the SSE parser and the stream assembler with hypothesis.

Properties: arbitrary bytes, cut anywhere, either parse to the same events or fail with the same
FaultError category — never another exception; arbitrary event data fed to the assembler either
assembles or raises FaultError; the fused intake (`feed_into`, `add_data`) assembles arbitrary
bytes, cut anywhere, exactly as `feed` and `add` do. Run standalone:

    python fuzz/fuzz_sse.py --examples 20000 [--seed 1]

The test suite runs it for a few hundred examples (tests/unit/endpoints/test_fuzz_entry.py).
"""

from __future__ import annotations

import argparse
import itertools
import json
from typing import Any

from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from servegate.endpoints.assembly import StreamAssembler
from servegate.endpoints.errors import FaultError
from servegate.endpoints.sse import SSEEvent, SSEFaultError, SSEParser
from servegate.endpoints.timing import TimingRecorder

ATOMS = [
    b"data:", b"data: ", b"event: error\n", b"id: \x00\n", b"retry: 9\n", b": ping\n",
    b"\n", b"\r", b"\r\n", b"\xef\xbb\xbf", b"[DONE]", b'{"choices":[{"index":0,"delta":',
    b'{"content":" x"}}]}', b"\xe4\xb8\x96", b"\xff", b"\xe2\x80\xa8", b'{"error":"e"}',
]  # fmt: skip
streams = st.lists(st.one_of(st.sampled_from(ATOMS), st.binary(max_size=12)), max_size=40).map(
    b"".join
)


def parse(data: bytes, cuts: list[int], cap: int) -> tuple[list[tuple[str, str, bool]], str]:
    """Events (data, type, complete) and the fault category ('' when none)."""
    parser = SSEParser(max_event_bytes=cap)
    events: list[SSEEvent] = []
    edges = [0, *sorted({c % (len(data) + 1) for c in cuts}), len(data)]
    try:
        for start, end in itertools.pairwise(edges):
            events += parser.feed(data[start:end])
        events += parser.close()
    except FaultError as exc:
        return [], str(exc.category)
    return [(e.data, e.event, e.complete) for e in events], ""


def check_chunking(data: bytes, cuts: list[int], cap: int) -> None:
    assert parse(data, cuts, cap) == parse(data, [], cap), (data, cuts)


def check_assembly(payloads: list[Any], chat: bool) -> None:
    assembler = StreamAssembler(TimingRecorder(), chat=chat)
    for i, payload in enumerate(payloads):
        data = payload if isinstance(payload, str) else json.dumps(payload)
        try:
            assembler.add(SSEEvent(data=data, index=i))
        except FaultError:
            return


def intake(data: bytes, cuts: list[int], cap: int, *, fused: bool) -> tuple[Any, ...]:
    """What a stream's reader is left with, by the fused or the event-by-event intake."""
    parser = SSEParser(max_event_bytes=cap)
    recorder = TimingRecorder(sent_ns=0)
    assembler = StreamAssembler(recorder, chat=True)
    edges = [0, *sorted({c % (len(data) + 1) for c in cuts} - {0, len(data)}), len(data)]
    fault = None
    try:
        for arrival, (start, end) in enumerate(itertools.pairwise(edges), start=1):
            if start == end:
                continue
            if fused:
                parser.feed_into(data[start:end], arrival, assembler)
                continue
            try:
                events = parser.feed(data[start:end], arrival)
            except SSEFaultError as exc:
                for event in exc.events:
                    assembler.add(event)
                raise
            for event in events:
                assembler.add(event)
    except FaultError as exc:
        fault = (exc.category, exc.message)
    timing = (recorder.chunk_ns, recorder.chunk_tokens, recorder.done_ns)
    return assembler.draft, assembler.done, assembler.events, timing, fault


def check_fused(data: bytes, cuts: list[int], cap: int) -> None:
    assert intake(data, cuts, cap, fused=True) == intake(data, cuts, cap, fused=False), (data, cuts)


keys = st.sampled_from(["index", "id", "function", "name", "arguments", "message", "content", "x"])
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2, 3) | st.floats() | st.text(max_size=4),
    lambda inner: st.lists(inner, max_size=2) | st.dictionaries(keys, inner, max_size=3),
    max_leaves=5,
)
deltas = st.fixed_dictionaries(
    {},
    optional={
        "content": st.none() | st.text(max_size=5),
        "reasoning_content": st.text(max_size=5),
        "tool_calls": st.lists(json_values, max_size=2),
    },
)
chunks = st.fixed_dictionaries(
    {
        "choices": st.lists(
            st.fixed_dictionaries({"index": st.integers(0, 1), "delta": deltas}), max_size=2
        )
    },
    optional={"usage": json_values, "error": json_values},
)
payloads = st.lists(st.one_of(chunks, json_values, st.text(max_size=10)), max_size=6)


def run(examples: int, seed_value: int | None = None) -> None:
    """Run both properties for `examples` examples each; raises on the first counterexample."""
    config = settings(
        max_examples=examples,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
    tests = [
        given(
            streams, st.lists(st.integers(0, 10_000), max_size=10), st.sampled_from([8, 64, 4096])
        )(check_chunking),
        given(payloads, st.booleans())(check_assembly),
        given(
            streams, st.lists(st.integers(0, 10_000), max_size=10), st.sampled_from([8, 64, 4096])
        )(check_fused),
    ]
    for test in tests:
        test = config(test)
        if seed_value is not None:
            test = seed(seed_value)(test)
        test()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=5000)
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args()
    run(args.examples, args.seed)
    print(f"ok: {args.examples} examples per property")


if __name__ == "__main__":
    main()
