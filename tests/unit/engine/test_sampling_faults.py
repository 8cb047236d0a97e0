"""The sampling faults on plain payloads, and one relayed: what reaches the engine and what
comes back (FAULTS.md 67-68)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from servegate.engine.fault_proxy import Payload, rewrite_stream_bytes
from servegate.engine.fault_rewrites import (
    PENALTY_KEYS,
    TRUNCATION_KEYS,
    collapse_choice_events,
    collapse_choices,
    drop_keys,
    narrow_nucleus,
    neutralise_penalties,
    replace_temperature,
    sampled,
)
from servegate.engine.faults import FaultOptions

CHAT = {"messages": [{"role": "user", "content": "Flip a coin."}], "max_tokens": 1}


@pytest.mark.parametrize(
    ("request_", "expected"),
    [
        ({**CHAT, "temperature": 1.0}, True),
        ({**CHAT, "temperature": 0}, False),
        (CHAT, True),  # no temperature: every server's default samples
        ({"prompt": "0", "temperature": 0.5}, True),
        ({"input": "embed me"}, False),
    ],
)
def test_a_request_samples_unless_its_temperature_is_zero(
    request_: Payload, expected: bool
) -> None:
    assert sampled(request_) is expected


def test_a_replaced_temperature_leaves_greedy_requests_exact() -> None:
    assert replace_temperature({**CHAT, "temperature": 1.5}, 0.7) == {**CHAT, "temperature": 0.7}
    assert replace_temperature({**CHAT, "temperature": 0}, 0.7) is None


def test_dropped_keys_leave_everything_else() -> None:
    request = {**CHAT, "temperature": 1.0, "top_p": 0.5, "top_k": 3, "min_p": 0.1, "seed": 7}
    assert drop_keys(request, TRUNCATION_KEYS) == {**CHAT, "temperature": 1.0, "seed": 7}
    assert drop_keys({**CHAT, "temperature": 1.0}, PENALTY_KEYS) is None
    assert drop_keys({**CHAT, "temperature": 0, "top_p": 0.5}, TRUNCATION_KEYS) is None


def test_neutralised_penalties_keep_the_request_s_keys_at_values_that_do_nothing() -> None:
    request = {**CHAT, "temperature": 0.7, "frequency_penalty": 1.5, "repetition_penalty": 1.5}
    assert neutralise_penalties(request) == {
        **CHAT, "temperature": 0.7, "frequency_penalty": 0.0, "repetition_penalty": 1.0,
    }  # fmt: skip
    assert neutralise_penalties({**CHAT, "temperature": 0.7, "presence_penalty": 0.0}) is None
    assert neutralise_penalties({**CHAT, "temperature": 0, "presence_penalty": 1.5}) is None


def test_a_narrowed_nucleus_scales_top_p_below_one_only() -> None:
    assert narrow_nucleus({**CHAT, "temperature": 1.0, "top_p": 0.6}, 0.5) == {
        **CHAT, "temperature": 1.0, "top_p": 0.3,
    }  # fmt: skip
    assert narrow_nucleus({**CHAT, "temperature": 1.0, "top_p": 1.0}, 0.5) is None


def _choices(texts: list[str]) -> Payload:
    return {"object": "chat.completion", "choices": [
        {"index": i, "message": {"role": "assistant", "content": t}, "finish_reason": "stop"}
        for i, t in enumerate(texts)
    ], "usage": {"completion_tokens": 3 * len(texts)}}  # fmt: skip


def test_collapsed_choices_repeat_choice_zero_under_every_index() -> None:
    collapsed = collapse_choices(_choices(["Heads", "Tails", "Edge"]))
    assert collapsed is not None
    assert [(c["index"], c["message"]["content"]) for c in collapsed["choices"]] == [
        (0, "Heads"), (1, "Heads"), (2, "Heads"),
    ]  # fmt: skip
    assert collapse_choices(_choices(["Heads"])) is None


def _event(index: int, content: str) -> dict[str, Any]:
    return {"choices": [{"index": index, "delta": {"content": content}, "finish_reason": None}]}


def test_collapsed_streams_send_choice_zero_s_deltas_under_every_index() -> None:
    events = [_event(0, "He"), _event(1, "Ta"), _event(0, "ads"), _event(1, "ils"),
              {"choices": [], "usage": {"completion_tokens": 4}}]  # fmt: skip
    raw = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events)
    out = rewrite_stream_bytes(raw + b"data: [DONE]\n\n", collapse_choice_events(2))
    joined: dict[int, str] = {}
    usage = None
    for chunk in out.split(b"\n\n"):
        if chunk.startswith(b"data: {"):
            payload = json.loads(chunk[6:])
            usage = payload.get("usage") or usage
            for choice in payload["choices"]:
                joined[choice["index"]] = (
                    joined.get(choice["index"], "") + choice["delta"]["content"]
                )
    assert joined == {0: "Heads", 1: "Heads"}
    assert usage == {"completion_tokens": 4}
    assert out.endswith(b"data: [DONE]\n\n")


def test_fault_options_refuse_a_zero_default_temperature_and_a_full_nucleus() -> None:
    with pytest.raises(ValueError, match="default_temperature"):
        FaultOptions(default_temperature=0)
    with pytest.raises(ValueError, match="nucleus_factor"):
        FaultOptions(nucleus_factor=1.0)
