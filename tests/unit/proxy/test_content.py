"""Every answer the proxy serves is classified by the one answer classifier (endpoints/answers.py):
an HTTP 200 that carries an error, a stream that breaks or ends without a finish reason, an
empty answer, JSON that does not parse where JSON was asked, degenerate text — each is an error
of the side that served it, not only HTTP >= 500 and transport failures."""

from __future__ import annotations

import json
from typing import Any

import pytest

from servegate.proxy.content import request_metrics
from servegate.proxy.exchange import CHAT_PATH, Exchange, completion_of

MS = 1_000_000
CHAT: dict[str, Any] = {"messages": [{"role": "user", "content": "hi"}], "temperature": 0}
STREAM: dict[str, Any] = {**CHAT, "stream": True}
JSON_MODE: dict[str, Any] = {**CHAT, "response_format": {"type": "json_object"}}


def _body(payload: object, status: int = 200) -> Exchange:
    exchange = Exchange(sent_ns=0, status=status, headers={"content-type": "application/json"})
    exchange.keep(json.dumps(payload).encode(), 40 * MS, 1 << 20)
    exchange.done_ns = 40 * MS
    return exchange


def _answer(content: str, finish: str | None = "stop") -> Exchange:
    message = {"role": "assistant", "content": content}
    return _body({"choices": [{"index": 0, "message": message, "finish_reason": finish}]})


def _events(*events: str) -> Exchange:
    exchange = Exchange(sent_ns=0, status=200, headers={"content-type": "text/event-stream"})
    for i, event in enumerate(events, start=1):
        exchange.keep(f"data: {event}\n\n".encode(), i * 10 * MS, 1 << 20)
    exchange.done_ns = (len(events) + 1) * 10 * MS
    return exchange


def _delta(content: str, finish: str | None = None) -> str:
    return json.dumps({"choices": [{"index": 0, "delta": {"content": content},
                                    "finish_reason": finish}]})  # fmt: skip


def _metrics(exchange: Exchange, request: dict[str, Any]) -> dict[str, float]:
    return request_metrics(exchange, completion_of(exchange, CHAT_PATH, request), request)


BAD = [
    (_body({"error": {"message": "CUDA error: illegal memory access"}}), CHAT, "error_body"),
    (_body({"object": "error", "message": "overloaded"}), CHAT, "error_body"),
    (_events(_delta("Hel"), json.dumps({"error": {"message": "engine died"}})), STREAM,
     "stream_error"),
    (_events(_delta("Hel"), _delta("lo")), STREAM, "truncated"),  # closed without [DONE]
    (_events(_delta("Hel"), _delta("lo"), "[DONE]"), STREAM, "truncated"),  # no finish_reason
    (_answer(""), CHAT, "empty"),
    (_answer("sure, here it is: {\"a\": 1"), JSON_MODE, "invalid_json"),
    (_answer("!" * 40), CHAT, "degenerate"),
    (_body({"error": "boom"}, status=500), CHAT, "failed"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("exchange", "request_body", "kind"),
    BAD,
    ids=["error-object", "object-error", "stream-error-event", "stream-cut", "no-finish-reason",
         "empty", "invalid-json", "degenerate", "http-500"],
)  # fmt: skip
def test_every_kind_of_bad_answer_is_an_error_of_its_side(
    exchange: Exchange, request_body: dict[str, Any], kind: str
) -> None:
    metrics = _metrics(exchange, request_body)
    assert metrics["error"] == 1.0, metrics
    assert metrics[f"answer_{kind}"] == 1.0, metrics
    assert "e2el_ms" not in metrics  # a failed answer's latency is not a latency sample


@pytest.mark.parametrize(
    ("exchange", "request_body"),
    [
        (_answer("Four."), CHAT),
        (_answer('{"a": 1}'), JSON_MODE),
        (_events(_delta("Fo"), _delta("ur.", "stop"), "[DONE]"), STREAM),
    ],
    ids=["text", "json", "stream"],
)
def test_a_good_answer_is_no_error_and_its_latency_counts(
    exchange: Exchange, request_body: dict[str, Any]
) -> None:
    metrics = _metrics(exchange, request_body)
    assert metrics["error"] == 0.0, metrics
    assert metrics["e2el_ms"] > 0


def test_an_answer_the_user_abandoned_counts_against_the_side_that_served_it() -> None:
    exchange = Exchange(sent_ns=0, status=None, error="the client disconnected", client_gone=True)
    exchange.done_ns = 10_000 * MS
    metrics = _metrics(exchange, CHAT)
    assert metrics["error"] == 1.0
    assert metrics["timeout"] == 1.0
    assert metrics["answer_abandoned"] == 1.0


def test_a_gzip_answer_is_read_as_the_user_gets_it_not_called_broken() -> None:
    import gzip

    answer = json.dumps(
        {"choices": [{"index": 0, "message": {"role": "assistant", "content": "Four."},
                      "finish_reason": "stop"}]}
    ).encode()  # fmt: skip
    exchange = Exchange(
        sent_ns=0, status=200,
        headers={"content-type": "application/json", "content-encoding": "gzip"},
    )  # fmt: skip
    packed = gzip.compress(answer)
    exchange.keep(packed[:10], 20 * MS, 1 << 20)  # gzip arrives in pieces like any body
    exchange.keep(packed[10:], 40 * MS, 1 << 20)
    exchange.done_ns = 40 * MS
    metrics = _metrics(exchange, CHAT)
    assert metrics["error"] == 0.0, metrics
    assert metrics["answer_ok"] == 1.0


def test_a_gzip_stream_keeps_the_arrival_time_of_each_event() -> None:
    import zlib

    packer = zlib.compressobj(wbits=31)  # gzip framing
    exchange = Exchange(
        sent_ns=0, status=200,
        headers={"content-type": "text/event-stream", "content-encoding": "gzip"},
    )  # fmt: skip
    events = [_delta("Fo"), _delta("ur.", "stop"), "[DONE]"]
    for i, event in enumerate(events, start=1):
        piece = packer.compress(f"data: {event}\n\n".encode()) + packer.flush(zlib.Z_SYNC_FLUSH)
        exchange.keep(piece, i * 100 * MS, 1 << 20)
    exchange.keep(packer.flush(), 400 * MS, 1 << 20)
    exchange.done_ns = 400 * MS
    metrics = _metrics(exchange, STREAM)
    assert metrics["error"] == 0.0, metrics
    assert metrics["ttft_ms"] == 100.0
