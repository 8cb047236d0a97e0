"""What each fault does to plain payloads: requests, JSON answers and streamed events."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from servegate.engine.fault_proxy import Payload, rewrite_stream_bytes
from servegate.engine.fault_rewrites import (
    DEFAULT_REASONING_TEXT,
    drift_template,
    drop_tool_fragment_events,
    ignore_eos,
    leak_reasoning,
    leak_reasoning_events,
    rechunk_tool_arguments,
    truncate_json,
    truncate_json_events,
    truncated_length,
)

ARGUMENTS = '{ "city": "Paris", "unit": "celsius" }'


def _answer(content: str | None, finish_reason: str = "stop") -> Payload:
    return {
        "object": "chat.completion",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": finish_reason,
            }
        ],
        "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8},
    }


def _chunk(delta: dict[str, Any], finish_reason: str | None = None) -> Payload:
    return {
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
    }


def _tool_chunk(arguments: str) -> Payload:
    call = {"index": 0, "id": "call_1", "type": "function"}
    function = {"name": "get_weather", "arguments": arguments}
    return _chunk({"function_call": dict(function), "tool_calls": [{**call, "function": function}]})


def _sse(payloads: list[Payload]) -> bytes:
    return b"".join(b"data: " + json.dumps(p).encode() + b"\n\n" for p in payloads) + (
        b"data: [DONE]\n\n"
    )


def _stream_payloads(raw: bytes) -> list[Payload]:
    events = [e for e in raw.split(b"\n\n") if e.startswith(b"data: {")]
    return [json.loads(e[len(b"data: ") :]) for e in events]


def _joined(payloads: list[Payload], key: str) -> str:
    text = ""
    for payload in payloads:
        delta = payload["choices"][0]["delta"]
        if key == "content":
            text += delta.get("content") or ""
        else:
            text += "".join(c["function"]["arguments"] for c in delta.get("tool_calls") or [])
    return text


# --- template-drift --------------------------------------------------------------------------


def test_template_drift_adds_a_system_message_to_a_chat_without_one() -> None:
    chat = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    drifted = drift_template(chat, "Be SmolLM.")
    assert drifted == {
        "messages": [
            {"role": "system", "content": "Be SmolLM."},
            {"role": "user", "content": "hi"},
        ],
        "max_tokens": 4,
    }
    assert chat == {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


@pytest.mark.parametrize(
    ("system", "drifted"),
    [
        ("Be brief.", "Be brief.\nBe SmolLM."),
        ([{"type": "text", "text": "Be brief."}],
         [{"type": "text", "text": "Be brief."}, {"type": "text", "text": "\nBe SmolLM."}]),
    ],
    ids=["text", "content-parts"],
)  # fmt: skip
def test_template_drift_appends_to_an_existing_system_message(
    system: object, drifted: object
) -> None:
    chat = {"messages": [{"role": "system", "content": system}, {"role": "user", "content": "hi"}]}
    assert drift_template(chat, "Be SmolLM.") == {
        "messages": [{"role": "system", "content": drifted}, {"role": "user", "content": "hi"}]
    }


def test_template_drift_leaves_bodies_without_messages_alone() -> None:
    assert drift_template({"prompt": "hi"}, "Be SmolLM.") is None


# --- eos-ignored -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("request_body", "forwarded"),
    [
        ({"messages": [], "max_tokens": 16}, {"messages": [], "max_tokens": 16, "min_tokens": 16}),
        ({"messages": []}, {"messages": [], "max_tokens": 64, "min_tokens": 64}),
        ({"prompt": "0", "max_tokens": 3}, {"prompt": "0", "max_tokens": 3, "min_tokens": 3}),
        ({"messages": [], "max_tokens": 8, "response_format": {"type": "text"}},
         {"messages": [], "max_tokens": 8, "min_tokens": 8, "response_format": {"type": "text"}}),
    ],
    ids=["chat", "chat-without-max-tokens", "completion", "plain-text-format"],
)  # fmt: skip
def test_eos_ignored_bans_eos_until_max_tokens(request_body: Payload, forwarded: Payload) -> None:
    assert ignore_eos(request_body, runaway_max_tokens=64) == forwarded


@pytest.mark.parametrize(
    "request_body",
    [
        {"messages": [], "tools": [{"type": "function", "function": {"name": "f"}}]},
        {"messages": [], "response_format": {"type": "json_object"}},
        {"input": "embed me"},
    ],
    ids=["tools", "json-mode", "embedding"],
)
def test_eos_ignored_leaves_tool_json_and_other_requests_alone(request_body: Payload) -> None:
    assert ignore_eos(request_body, runaway_max_tokens=64) is None


# --- reasoning-leak --------------------------------------------------------------------------


def test_reasoning_leak_prefixes_the_answer_content() -> None:
    leaked = leak_reasoning(_answer("The answer is 4"), DEFAULT_REASONING_TEXT)
    assert leaked is not None
    content = leaked["choices"][0]["message"]["content"]
    assert content == "<think>Let me think about this step by step.</think>\nThe answer is 4"
    assert leaked["usage"] == _answer("")["usage"]


def test_reasoning_leak_leaves_tool_call_answers_without_content_alone() -> None:
    assert leak_reasoning(_answer(None, "tool_calls"), DEFAULT_REASONING_TEXT) is None


def test_reasoning_leak_prefixes_only_the_first_content_delta_of_a_stream() -> None:
    stream = _sse(
        [
            _chunk({"role": "assistant", "content": None}),
            _chunk({"content": "The"}),
            _chunk({"content": " answer"}),
            _chunk({}, "stop"),
        ]
    )
    rewritten = rewrite_stream_bytes(stream, leak_reasoning_events("<think>x</think>"))
    payloads = _stream_payloads(rewritten)
    assert [p["choices"][0]["delta"].get("content") for p in payloads] == [
        None, "<think>x</think>The", " answer", None,
    ]  # fmt: skip
    assert rewritten.endswith(b"data: [DONE]\n\n")
    # Events the fault does not touch keep their exact bytes.
    assert rewritten.startswith(stream.split(b"\n\n")[0] + b"\n\n")


# --- json-truncated --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "kept"),
    [
        ('{ "city": "Paris" }', 13),  # 30 % of 19 characters dropped
        ("{}", 1),  # the closing brace goes even where 30 % is less than one character
        ('{"a": 1}\n\n', 7),  # trailing blanks do not save the brace
        ("", 0),
    ],
    ids=["object", "tiny", "trailing-newlines", "empty"],
)
def test_truncated_length_drops_a_share_and_always_the_closing_brace(text: str, kept: int) -> None:
    assert truncated_length(text, 0.3) == kept


def test_json_truncated_cuts_the_content_and_keeps_finish_reason() -> None:
    cut = truncate_json(_answer('{ "city": "Paris" }'), 0.3)
    assert cut is not None
    assert cut["choices"][0]["message"]["content"] == '{ "city": "Pa'
    assert cut["choices"][0]["finish_reason"] == "stop"
    with pytest.raises(ValueError, match="Unterminated string"):
        json.loads(cut["choices"][0]["message"]["content"])


def test_json_truncated_streams_the_same_cut_as_the_non_streamed_answer() -> None:
    full = '{\n  "city": "Paris",\n  "country": "France"\n}'
    pieces = [full[i : i + 3] for i in range(0, len(full), 3)]
    chunks = [_chunk({"role": "assistant", "content": ""})]
    chunks += [_chunk({"content": piece}) for piece in pieces] + [_chunk({}, "stop")]
    payloads = _stream_payloads(rewrite_stream_bytes(_sse(chunks), truncate_json_events(0.3)))
    assert _joined(payloads, "content") == full[: truncated_length(full, 0.3)]
    assert payloads[-1]["choices"][0]["finish_reason"] == "stop"
    # Released progressively, not all at the end.
    assert _joined(payloads[: len(payloads) // 2], "content")


# --- stream-tool-args ------------------------------------------------------------------------


def test_stream_tool_args_drops_the_second_fragment_of_a_token_stream() -> None:
    fragments = ["{", ' "', "city", '":', ' "', "Paris", '"', " }", ""]
    chunks = [_chunk({"role": "assistant"}), *(_tool_chunk(f) for f in fragments)]
    chunks.append(_chunk({}, "tool_calls"))
    payloads = _stream_payloads(rewrite_stream_bytes(_sse(chunks), drop_tool_fragment_events(2)))
    joined = _joined(payloads, "tool_calls")
    assert joined == '{city": "Paris" }'
    legacy = "".join((p["choices"][0]["delta"].get("function_call") or {}).get("arguments", "")
                     for p in payloads)  # fmt: skip
    assert legacy == joined
    assert len(payloads) == len(chunks)
    with pytest.raises(ValueError, match="Expecting property name"):
        json.loads(joined)


def test_stream_tool_args_rechunks_arguments_sent_in_one_delta_before_dropping() -> None:
    chunks = [_tool_chunk(ARGUMENTS), _chunk({}, "tool_calls")]
    payloads = _stream_payloads(rewrite_stream_bytes(_sse(chunks), drop_tool_fragment_events(2)))
    assert _joined(payloads, "tool_calls") == ARGUMENTS[:8] + ARGUMENTS[16:]
    assert len(payloads) == 1 + len(rechunk_tool_arguments(_tool_chunk(ARGUMENTS)))


def test_rechunked_arguments_join_back_and_name_the_call_once() -> None:
    events = rechunk_tool_arguments(_tool_chunk(ARGUMENTS))
    assert len(events) == 5
    assert _joined(events, "tool_calls") == ARGUMENTS
    calls = [e["choices"][0]["delta"]["tool_calls"][0] for e in events]
    assert calls[0]["id"] == "call_1"
    assert calls[0]["function"]["name"] == "get_weather"
    assert all(set(call) == {"index", "function"} for call in calls[1:])


def test_stream_tool_args_passes_content_streams_unchanged() -> None:
    stream = _sse([_chunk({"content": "Hello"}), _chunk({}, "stop")])
    assert rewrite_stream_bytes(stream, drop_tool_fragment_events(2)) == stream


def test_rewrites_never_mutate_their_input() -> None:
    answer, chunk = _answer('{"a": 1}'), _tool_chunk(ARGUMENTS)
    answer_copy, chunk_copy = copy.deepcopy(answer), copy.deepcopy(chunk)
    leak_reasoning(answer, "x")
    truncate_json(answer, 0.5)
    drop_tool_fragment_events(1)(chunk)
    leak_reasoning_events("x")(_chunk({"content": "a"}))
    assert (answer, chunk) == (answer_copy, chunk_copy)
