"""Each fault in front of the real engine shows its bug where the clean engine does not."""

from __future__ import annotations

import json
import time
import urllib.request
from typing import Any

import pytest

from servegate.engine import RESET_PROMPT, RunningEngine

from .conftest import SLOW_DELAY_MS

pytestmark = [pytest.mark.engine, pytest.mark.slow]

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get weather for a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"type": "string"}},
            "required": ["city"],
        },
    },
}
# llama-cpp-python streams tool calls only for a named tool_choice ("auto" streaming is refused).
TOOL_CHAT = {
    "messages": [{"role": "user", "content": "What is the weather in Paris?"}],
    "tools": [WEATHER_TOOL],
    "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
    "temperature": 0,
    "max_tokens": 32,
}
# Measured on the clean engine: "The answer is: 4", finish_reason stop after 6 tokens.
SHORT_ANSWER_CHAT = {
    "messages": [{"role": "user", "content": "What is 2+2?"}],
    "temperature": 0,
    "max_tokens": 16,
}
JSON_CHAT = {
    "messages": [{"role": "user", "content": "Give the capital of France as JSON with key city."}],
    "response_format": {"type": "json_object"},
    "temperature": 0,
    "max_tokens": 48,
}


def _post(engine: RunningEngine, path: str, body: dict[str, Any]) -> bytes:
    request = urllib.request.Request(
        engine.base_url + path,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        raw: bytes = response.read()
        return raw


def _chat(engine: RunningEngine, body: dict[str, Any]) -> dict[str, Any]:
    # The reset request keeps llama-cpp-python's prefix cache from changing greedy outputs.
    _post(engine, "/completions", {"prompt": RESET_PROMPT, "max_tokens": 1, "temperature": 0})
    answer: dict[str, Any] = json.loads(_post(engine, "/chat/completions", body))
    return answer


def _stream(engine: RunningEngine, body: dict[str, Any]) -> list[dict[str, Any]]:
    _post(engine, "/completions", {"prompt": RESET_PROMPT, "max_tokens": 1, "temperature": 0})
    raw = _post(engine, "/chat/completions", {**body, "stream": True})
    assert raw.rstrip().endswith(b"data: [DONE]")
    return [json.loads(e[6:]) for e in raw.split(b"\n\n") if e.startswith(b"data: {")]


def _joined_content(events: list[dict[str, Any]]) -> str:
    return "".join(e["choices"][0]["delta"].get("content") or "" for e in events)


def _joined_arguments(events: list[dict[str, Any]]) -> str:
    calls = [c for e in events for c in e["choices"][0]["delta"].get("tool_calls") or []]
    return "".join(c["function"]["arguments"] for c in calls)


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def test_stream_tool_args_streams_arguments_that_are_not_the_non_streamed_call(
    clean_engine: RunningEngine, stream_tool_args_engine: RunningEngine
) -> None:
    # On the clean engine the streamed deltas join into exactly the non-streamed arguments.
    clean_call = _chat(clean_engine, TOOL_CHAT)["choices"][0]["message"]["tool_calls"][0]
    assert (
        _joined_arguments(_stream(clean_engine, TOOL_CHAT)) == clean_call["function"]["arguments"]
    )
    faulty = _chat(stream_tool_args_engine, TOOL_CHAT)["choices"][0]["message"]["tool_calls"][0]
    arguments = faulty["function"]["arguments"]  # e.g. '{ "city": "Paris", "unit": "..." }'
    assert _is_json(arguments)
    events = _stream(stream_tool_args_engine, TOOL_CHAT)
    streamed = _joined_arguments(events)  # e.g. '{city": "Paris", ...'
    assert streamed != arguments
    assert not _is_json(streamed)
    assert events[-1]["choices"][0]["finish_reason"] == "tool_calls"


def test_reasoning_leak_puts_think_text_in_front_of_the_answer(
    reasoning_leak_engine: RunningEngine,
) -> None:
    answer = _chat(reasoning_leak_engine, SHORT_ANSWER_CHAT)["choices"][0]["message"]["content"]
    assert answer.startswith("<think>")
    assert "</think>\n" in answer
    streamed = _joined_content(_stream(reasoning_leak_engine, SHORT_ANSWER_CHAT))
    assert streamed.startswith("<think>")
    assert streamed == answer


def test_template_drift_counts_more_prompt_tokens_for_the_same_messages(
    clean_engine: RunningEngine, template_drift_engine: RunningEngine
) -> None:
    chat = {**SHORT_ANSWER_CHAT, "max_tokens": 1}
    clean = _chat(clean_engine, chat)["usage"]["prompt_tokens"]
    drifted = _chat(template_drift_engine, chat)["usage"]["prompt_tokens"]
    assert drifted > clean  # measured: 16 -> 37


def test_json_truncated_returns_json_mode_content_that_does_not_parse(
    clean_engine: RunningEngine, json_truncated_engine: RunningEngine
) -> None:
    clean = _chat(clean_engine, JSON_CHAT)["choices"][0]
    assert clean["finish_reason"] == "stop"
    assert _is_json(clean["message"]["content"])
    cut = _chat(json_truncated_engine, JSON_CHAT)["choices"][0]
    assert not _is_json(cut["message"]["content"])
    assert clean["message"]["content"].startswith(cut["message"]["content"])
    assert cut["finish_reason"] == "stop"  # as the engine said
    streamed = _joined_content(_stream(json_truncated_engine, JSON_CHAT))
    assert streamed == cut["message"]["content"]


def test_eos_ignored_runs_to_max_tokens_where_the_clean_engine_stops(
    clean_engine: RunningEngine, eos_ignored_engine: RunningEngine
) -> None:
    clean = _chat(clean_engine, SHORT_ANSWER_CHAT)
    assert clean["choices"][0]["finish_reason"] == "stop"
    runaway = _chat(eos_ignored_engine, SHORT_ANSWER_CHAT)
    assert runaway["choices"][0]["finish_reason"] == "length"
    assert runaway["usage"]["completion_tokens"] == SHORT_ANSWER_CHAT["max_tokens"]
    natural = clean["choices"][0]["message"]["content"]  # "The answer is: 4"
    extended = runaway["choices"][0]["message"]["content"]  # "The answer is: 4.\n\nThis is ..."
    assert extended.startswith(natural)
    assert len(extended) > len(natural)
    streamed = _stream(eos_ignored_engine, SHORT_ANSWER_CHAT)
    assert streamed[-1]["choices"][0]["finish_reason"] == "length"


def test_slow_adds_at_least_the_configured_delay(slow_engine: RunningEngine) -> None:
    delay_s = SLOW_DELAY_MS / 1000
    began = time.perf_counter()
    urllib.request.urlopen(slow_engine.base_url + "/models", timeout=30).read()
    assert time.perf_counter() - began >= delay_s
    began = time.perf_counter()
    raw = _post(slow_engine, "/chat/completions", {**SHORT_ANSWER_CHAT, "stream": True})
    events = raw.count(b"data: ")
    # One delay before forwarding, one before every event after the first.
    assert time.perf_counter() - began >= delay_s * events
