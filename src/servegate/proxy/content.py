"""The per-request measurements the proxy makes of every answer it serves (names and meanings in
`servegate.canary.protocol.METRICS`): the same degeneration and parse checks the gates use."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from servegate.endpoints.types import Completion
from servegate.probes.structure import parse_json
from servegate.proxy.exchange import Exchange
from servegate.stats.degeneration import degeneration_metrics, is_severe, repeated_token_ratio

JSON_FORMATS = frozenset({"json_object", "json_schema"})


def asks_for_json(request: Mapping[str, Any]) -> bool:
    """Whether the request asked for a JSON answer (response_format json_object/json_schema)."""
    fmt = request.get("response_format")
    return isinstance(fmt, Mapping) and fmt.get("type") in JSON_FORMATS


def is_greedy(request: Mapping[str, Any]) -> bool:
    """Temperature 0 (or top_k 1): the only requests whose two answers must be equal."""
    temperature = request.get("temperature")
    top_k = request.get("top_k")
    return (isinstance(temperature, int | float) and temperature == 0) or top_k == 1


def json_failure(completion: Completion) -> bool:
    """The answer does not parse as JSON (a fence around it is not accepted, as in JSON mode)."""
    _, error = parse_json(completion.text, allow_fence=False)
    return error is not None


def request_metrics(
    exchange: Exchange, completion: Completion | None, request: Mapping[str, Any]
) -> dict[str, float]:
    """Every METRICS value measurable for this request; what was not measured is absent."""
    metrics: dict[str, float] = {
        "error": float(exchange.failed),
        "timeout": float(exchange.timed_out),
    }
    if exchange.done_ns is not None and exchange.error is None:
        metrics["e2el_ms"] = (exchange.done_ns - exchange.sent_ns) / 1e6
    if completion is None or not completion.ok:
        return metrics
    timing = completion.timing
    if timing.token_chunk_ns:
        metrics["ttft_ms"] = (timing.token_chunk_ns[0] - timing.sent_ns) / 1e6
    text = completion.text
    degeneration = degeneration_metrics(text)
    metrics["empty_output"] = float(degeneration.empty and not completion.tool_calls)
    metrics["repeated_token_ratio"] = repeated_token_ratio(text)
    metrics["abnormal_char_ratio"] = degeneration.abnormal_char_ratio
    metrics["garbage"] = float(is_severe(degeneration) is not None)
    if asks_for_json(request):
        metrics["json_parse_failure"] = float(json_failure(completion))
    if completion.tool_calls:
        metrics["tool_call_parse_failure"] = float(
            not all(call.arguments_valid for call in completion.tool_calls)
        )
    return metrics
