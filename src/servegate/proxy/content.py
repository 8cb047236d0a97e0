"""The per-request measurements the proxy makes of every answer it serves (names and meanings in
`servegate.canary.protocol.METRICS`): the same degeneration and parse checks the gates use."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from servegate.endpoints.answers import (
    AnswerClass,
    AnswerClassification,
    classify_answer,
    classify_completion,
)
from servegate.endpoints.errors import ErrorCategory
from servegate.endpoints.types import Completion
from servegate.proxy.exchange import Exchange
from servegate.stats.degeneration import degeneration_metrics, repeated_token_ratio

JSON_FORMATS = frozenset({"json_object", "json_schema"})
# The canary's `timeout` metric: the side hung (AnswerClass.TIMEOUT, endpoints.errors.HUNG) or
# the user gave up waiting for it (ABANDONED) — both are an answer not given in time.
NOT_IN_TIME = frozenset({AnswerClass.TIMEOUT, AnswerClass.ABANDONED})


def asks_for_json(request: Mapping[str, Any]) -> bool:
    """Whether the request asked for a JSON answer (response_format json_object/json_schema)."""
    fmt = request.get("response_format")
    return isinstance(fmt, Mapping) and fmt.get("type") in JSON_FORMATS


def is_greedy(request: Mapping[str, Any]) -> bool:
    """Temperature 0 (or top_k 1): the only requests whose two answers must be equal."""
    temperature = request.get("temperature")
    top_k = request.get("top_k")
    return (isinstance(temperature, int | float) and temperature == 0) or top_k == 1


def classify_exchange(
    exchange: Exchange, completion: Completion | None, request: Mapping[str, Any]
) -> AnswerClassification:
    """The answer's class by the one classifier (endpoints/answers.py); without a Completion (a path
    with no text, or an answer too large to keep) from the exchange's status alone."""
    if completion is not None:
        return classify_completion(
            completion, streamed=bool(request.get("stream")), json_asked=asks_for_json(request)
        )
    if exchange.client_gone:
        return classify_answer(
            error=ErrorCategory.CANCELLED.value, error_message=exchange.error or ""
        )
    if exchange.timed_out:
        return classify_answer(
            error=ErrorCategory.TIMEOUT.value, error_message=exchange.error or ""
        )
    if exchange.error is not None or exchange.status is None or exchange.status >= 400:
        return classify_answer(
            error=ErrorCategory.SERVER.value,
            error_message=exchange.error or f"HTTP {exchange.status}",
        )
    return classify_answer(error=None)


def request_metrics(
    exchange: Exchange, completion: Completion | None, request: Mapping[str, Any]
) -> dict[str, float]:
    """Every METRICS value measurable for this request; what was not measured is absent."""
    answer = classify_exchange(exchange, completion, request)
    metrics: dict[str, float] = {
        "error": float(not answer.ok),
        "timeout": float(answer.kind in NOT_IN_TIME),
        f"answer_{answer.kind.value}": 1.0,
    }
    # A bad answer's latency is no latency sample (as in the gates: latencies of ok answers).
    if answer.ok and exchange.done_ns is not None:
        metrics["e2el_ms"] = (exchange.done_ns - exchange.sent_ns) / 1e6
    if completion is None or not completion.ok:
        return metrics
    timing = completion.timing
    if answer.ok and timing.token_chunk_ns:
        metrics["ttft_ms"] = (timing.token_chunk_ns[0] - timing.sent_ns) / 1e6
    # The rates of each kind read the one classifier's problems (an answer can have several).
    text = completion.text
    metrics["empty_output"] = float(answer.has(AnswerClass.EMPTY))
    metrics["repeated_token_ratio"] = repeated_token_ratio(text)
    metrics["abnormal_char_ratio"] = degeneration_metrics(text).abnormal_char_ratio
    metrics["garbage"] = float(answer.has(AnswerClass.DEGENERATE))
    if asks_for_json(request):
        metrics["json_parse_failure"] = float(answer.has(AnswerClass.INVALID_JSON))
    if completion.tool_calls:
        metrics["tool_call_parse_failure"] = float(answer.has(AnswerClass.INVALID_TOOL_ARGS))
    return metrics
