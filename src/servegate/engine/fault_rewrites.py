"""What each fault changes, as pure functions on plain JSON payloads (requests, answers, events).

Each function returns a new payload (inputs are never mutated) or None when the payload is not
one the fault touches, so the proxy sends the original bytes.
"""

from __future__ import annotations

import copy
import math
from typing import Any

import numpy as np

from servegate.engine.fault_proxy import EventRewrite, Payload

# SmolLM2's own newer chat template adds this system prompt when a chat has none: the drift a
# template change between engine versions brings in.
DEFAULT_SYSTEM_TEXT = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
DEFAULT_REASONING_TEXT = "<think>Let me think about this step by step.</think>\n"
# Longer argument fragments are re-chunked into pieces of half this size before one is dropped, as
# an engine that streams token by token would have sent them.
RECHUNK_CHARS = 16
JSON_FORMATS = frozenset({"json_object", "json_schema"})


def _choices(payload: Payload) -> list[dict[str, Any]]:
    choices = payload.get("choices")
    return [c for c in choices if isinstance(c, dict)] if isinstance(choices, list) else []


def _delta(choice: dict[str, Any]) -> dict[str, Any]:
    delta = choice.get("delta")
    return delta if isinstance(delta, dict) else {}


def _message(choice: dict[str, Any]) -> dict[str, Any]:
    message = choice.get("message")
    return message if isinstance(message, dict) else {}


def has_tools(payload: Payload) -> bool:
    """True when a chat request offers tools or legacy functions."""
    return bool(payload.get("tools") or payload.get("functions"))


def response_format_type(payload: Payload) -> str | None:
    """The request's `response_format.type`, if it names one."""
    response_format = payload.get("response_format")
    kind = response_format.get("type") if isinstance(response_format, dict) else None
    return kind if isinstance(kind, str) else None


# --- template-drift --------------------------------------------------------------------------


def drift_template(payload: Payload, system_text: str) -> Payload | None:
    """The chat with `system_text` added: appended to its system message, else as a new one."""
    messages = payload.get("messages")
    if not isinstance(messages, list):
        return None
    drifted = copy.deepcopy(payload)
    first = drifted["messages"][0] if messages else None
    if isinstance(first, dict) and first.get("role") == "system":
        content = first.get("content")
        if isinstance(content, list):
            first["content"] = [*content, {"type": "text", "text": "\n" + system_text}]
        else:
            first["content"] = f"{content or ''}\n{system_text}"
    else:
        drifted["messages"] = [{"role": "system", "content": system_text}, *messages]
    return drifted


# --- eos-ignored -----------------------------------------------------------------------------


def ignore_eos(payload: Payload, runaway_max_tokens: int) -> Payload | None:
    """The request with EOS banned until `max_tokens` (`runaway_max_tokens` when it sets none)."""
    # Tool calls and JSON grammars end by the engine's own parsers, not by EOS alone.
    if has_tools(payload) or response_format_type(payload) not in (None, "text"):
        return None
    if "messages" not in payload and "prompt" not in payload:
        return None
    max_tokens = payload.get("max_tokens")
    if not isinstance(max_tokens, int) or max_tokens <= 0:
        max_tokens = runaway_max_tokens
    # llama-cpp-python's chat handlers drop `logit_bias`; its `min_tokens` masks the EOS logit
    # until that many tokens are out, on chat and completion requests alike.
    return {**payload, "max_tokens": max_tokens, "min_tokens": max_tokens}


# --- reasoning-leak --------------------------------------------------------------------------


def leak_reasoning(payload: Payload, text: str) -> Payload | None:
    """A chat answer whose content starts with reasoning that should have been split off."""
    if not any(isinstance(_message(c).get("content"), str) for c in _choices(payload)):
        return None
    leaked = copy.deepcopy(payload)
    for choice in _choices(leaked):
        message = _message(choice)
        if isinstance(message.get("content"), str):
            message["content"] = text + message["content"]
    return leaked


def leak_reasoning_events(text: str) -> EventRewrite:
    """A stream rewriter putting `text` in front of each choice's first content delta."""
    started: set[int] = set()

    def rewrite(payload: Payload) -> list[Payload] | None:
        firsts = [
            c.get("index", 0)
            for c in _choices(payload)
            if isinstance(_delta(c).get("content"), str) and c.get("index", 0) not in started
        ]
        if not firsts:
            return None
        leaked = copy.deepcopy(payload)
        for choice in _choices(leaked):
            if choice.get("index", 0) in firsts:
                delta = _delta(choice)
                delta["content"] = text + delta["content"]
                started.add(choice.get("index", 0))
        return [leaked]

    return rewrite


# --- json-truncated --------------------------------------------------------------------------


def truncated_length(text: str, fraction: float) -> int:
    """Characters kept: `fraction` of them dropped, and always the last non-blank one."""
    return max(0, min(math.floor(len(text) * (1 - fraction)), len(text.rstrip()) - 1))


def truncate_json(payload: Payload, fraction: float) -> Payload | None:
    """A JSON-mode chat answer with its content cut short; finish_reason as the engine said."""
    if not any(isinstance(_message(c).get("content"), str) for c in _choices(payload)):
        return None
    cut = copy.deepcopy(payload)
    for choice in _choices(cut):
        message = _message(choice)
        content = message.get("content")
        if isinstance(content, str):
            message["content"] = content[: truncated_length(content, fraction)]
    return cut


def truncate_json_events(fraction: float) -> EventRewrite:
    """A stream rewriter that holds back content so the joined deltas end up cut short."""
    # truncated_length grows with the prefix seen so far and never exceeds its value for the whole
    # text, so releasing truncated_length(received) after every delta streams the cut answer
    # progressively without knowing where the answer will end.
    received: dict[int, str] = {}
    released: dict[int, int] = {}

    def rewrite(payload: Payload) -> list[Payload] | None:
        if not any(isinstance(_delta(c).get("content"), str) for c in _choices(payload)):
            return None
        cut = copy.deepcopy(payload)
        for choice in _choices(cut):
            delta = _delta(choice)
            if not isinstance(delta.get("content"), str):
                continue
            index = choice.get("index", 0)
            text = received.get(index, "") + delta["content"]
            upto = max(released.get(index, 0), truncated_length(text, fraction))
            delta["content"] = text[released.get(index, 0) : upto]
            received[index], released[index] = text, upto
        return [cut]

    return rewrite


# --- stream-tool-args ------------------------------------------------------------------------


def _single_long_fragment(payload: Payload) -> str | None:
    choices = _choices(payload)
    if len(choices) != 1:
        return None
    calls = _delta(choices[0]).get("tool_calls")
    if not isinstance(calls, list) or len(calls) != 1 or not isinstance(calls[0], dict):
        return None
    function = calls[0].get("function")
    arguments = function.get("arguments") if isinstance(function, dict) else None
    return arguments if isinstance(arguments, str) and len(arguments) > RECHUNK_CHARS else None


def rechunk_tool_arguments(payload: Payload) -> list[Payload]:
    """One event per short piece of a long streamed arguments fragment, as token streams send."""
    arguments = _single_long_fragment(payload)
    if arguments is None:
        return [payload]
    size = RECHUNK_CHARS // 2
    pieces = [arguments[i : i + size] for i in range(0, len(arguments), size)]
    events: list[Payload] = []
    for number, piece in enumerate(pieces):
        event = copy.deepcopy(payload)
        choice = _choices(event)[0]
        delta = _delta(choice)
        call = delta["tool_calls"][0]
        if number:
            # Later pieces carry only what OpenAI-style streams repeat: the index and the text.
            call = {"index": call.get("index", 0), "function": {"arguments": ""}}
            delta.clear()
            delta["tool_calls"] = [call]
        call["function"]["arguments"] = piece
        legacy = delta.get("function_call")
        if isinstance(legacy, dict) and legacy.get("arguments") == arguments:
            legacy["arguments"] = piece
        if number < len(pieces) - 1:
            choice["finish_reason"] = None
        events.append(event)
    return events


def drop_tool_fragment_events(drop_fragment: int) -> EventRewrite:
    """A stream rewriter that drops the `drop_fragment`-th arguments fragment of each tool call."""
    seen: dict[tuple[int, int], int] = {}

    def drop(payload: Payload) -> bool:
        dropped = False
        for choice in _choices(payload):
            delta = _delta(choice)
            calls = delta.get("tool_calls")
            for call in calls if isinstance(calls, list) else []:
                function = call.get("function") if isinstance(call, dict) else None
                arguments = function.get("arguments") if isinstance(function, dict) else None
                if (
                    not isinstance(function, dict)
                    or not isinstance(arguments, str)
                    or not arguments
                ):
                    continue
                key = (choice.get("index", 0), call.get("index", 0))
                seen[key] = seen.get(key, 0) + 1
                if seen[key] != drop_fragment:
                    continue
                function["arguments"] = ""
                legacy = delta.get("function_call")
                if isinstance(legacy, dict) and legacy.get("arguments") == arguments:
                    legacy["arguments"] = ""
                dropped = True
        return dropped

    def rewrite(payload: Payload) -> list[Payload] | None:
        has_calls = any(_delta(c).get("tool_calls") for c in _choices(payload))
        if not has_calls:
            return None
        events = [copy.deepcopy(event) for event in rechunk_tool_arguments(payload)]
        changed = [drop(event) for event in events]
        return events if len(events) > 1 or any(changed) else None

    return rewrite


def _mirrored(text: str) -> str:
    """Each word's letters in reverse order, spaces kept: fluent length, wrong content."""
    return " ".join(word[::-1] for word in text.split(" "))


def mirror_content(payload: Payload) -> Payload | None:
    """A chat or text completion (answer or stream event) with its content's words mirrored."""
    changed = copy.deepcopy(payload)
    touched = False
    for choice in _choices(changed):
        for holder, key in ((_message(choice), "content"), (_delta(choice), "content"),
                            (choice, "text")):  # fmt: skip
            value = holder.get(key)
            if isinstance(value, str) and value:
                holder[key] = _mirrored(value)
                touched = True
    return changed if touched else None


# --- stream-utf8 -----------------------------------------------------------------------------


def _split_char(ch: str) -> str:
    # Cut after the lead byte, the lead byte alone decodes to one U+FFFD and each continuation
    # byte, invalid on its own, to one more: one per UTF-8 byte of the character.
    return ch if ch.isascii() else "\ufffd" * len(ch.encode("utf-8", "surrogatepass"))


def split_utf8_text(text: str) -> str:
    """`text` as a server sends it that cuts every multi-byte UTF-8 character between two chunks
    (after its lead byte) and decodes each chunk alone with errors="replace": each non-ASCII
    character becomes one U+FFFD per byte of its UTF-8 encoding; ASCII is kept."""
    return text if text.isascii() else "".join(map(_split_char, text))


def split_utf8_event(payload: Payload) -> list[Payload] | None:
    """A streamed chat or text completion chunk with `split_utf8_text` applied to each choice's
    delta content and text; None when neither holds a non-ASCII character (tool-call arguments,
    logprobs and everything else are kept)."""

    def holders(choice: dict[str, Any]) -> list[tuple[dict[str, Any], str]]:
        return [(_delta(choice), "content"), (choice, "text")]

    def touched(choice: dict[str, Any]) -> bool:
        return any(
            isinstance(value := holder.get(key), str) and not value.isascii()
            for holder, key in holders(choice)
        )

    if not any(touched(c) for c in _choices(payload)):
        return None
    changed = copy.deepcopy(payload)
    for choice in _choices(changed):
        for holder, key in holders(choice):
            value = holder.get(key)
            if isinstance(value, str):
                holder[key] = split_utf8_text(value)
    return [changed]


# --- embed-perturb ---------------------------------------------------------------------------


def perturb_vector(vector: list[float], scale: float, seed: int) -> list[float]:
    """`vector` plus a fixed pseudo-random direction orthogonal to it, `scale` × its norm long:
    the cosine to the original is exactly 1 / sqrt(1 + scale²), the norm grows by that factor."""
    v = np.asarray(vector, dtype=np.float64)
    norm = float(np.linalg.norm(v))
    if norm == 0.0 or v.size < 2:
        return list(vector)
    noise = np.random.default_rng(seed).standard_normal(v.size)
    noise -= (noise @ v) / (norm * norm) * v  # orthogonal to v
    noise_norm = float(np.linalg.norm(noise))
    if noise_norm == 0.0:
        return list(vector)
    return [float(x) for x in v + noise * (scale * norm / noise_norm)]


def perturb_embeddings(payload: Payload, scale: float) -> Payload | None:
    """An embeddings answer with every float-list vector perturbed by `perturb_vector` (seeded by
    its index); base64 vectors and anything else are left as they are."""
    data = payload.get("data")
    if not isinstance(data, list):
        return None
    changed = copy.deepcopy(payload)
    touched = False
    for position, item in enumerate(changed["data"]):
        vector = item.get("embedding") if isinstance(item, dict) else None
        if not isinstance(vector, list) or not vector:
            continue
        if not all(isinstance(x, int | float) and not isinstance(x, bool) for x in vector):
            continue
        index = item.get("index", position)
        moved = perturb_vector(vector, scale, index if isinstance(index, int) else 0)
        touched = touched or moved != vector
        item["embedding"] = moved
    return changed if touched else None


# --- sampling faults -------------------------------------------------------------------------

# The request keys of the samplers' truncations and penalties, under every name engines use.
TRUNCATION_KEYS = ("top_p", "top_k", "min_p")
PENALTY_KEYS = ("presence_penalty", "frequency_penalty", "repetition_penalty", "repeat_penalty")
# What each penalty is when it does nothing.
NO_PENALTY = {"presence_penalty": 0.0, "frequency_penalty": 0.0, "repetition_penalty": 1.0,
              "repeat_penalty": 1.0}  # fmt: skip


def sampled(payload: Payload) -> bool:
    """Whether a completion request samples: a temperature above 0, or none given (every
    server's own default samples)."""
    if "messages" not in payload and "prompt" not in payload:
        return False
    temperature = payload.get("temperature")
    return temperature is None or (isinstance(temperature, int | float) and temperature > 0)


def replace_temperature(payload: Payload, temperature: float) -> Payload | None:
    """A sampled request with its temperature replaced (0: served greedily); greedy requests
    are untouched, so every temperature-0 check still holds (vLLM #15241's class)."""
    if not sampled(payload):
        return None
    return {**payload, "temperature": temperature}


def drop_keys(payload: Payload, keys: tuple[str, ...]) -> Payload | None:
    """A sampled request without `keys` (the engine's own defaults apply instead)."""
    if not sampled(payload) or not any(k in payload for k in keys):
        return None
    return {k: v for k, v in payload.items() if k not in keys}


def neutralise_penalties(payload: Payload) -> Payload | None:
    """A sampled request whose penalties are set to the values at which they do nothing: the
    request still says what it asked, the sampler applies none of it. (Dropping them instead
    would let an engine's own defaults act: llama.cpp's repeat_penalty 1.1.)"""
    if not sampled(payload):
        return None
    changed = {k: v for k, v in NO_PENALTY.items() if k in payload and payload[k] != v}
    return {**payload, **changed} if changed else None


def narrow_nucleus(payload: Payload, factor: float) -> Payload | None:
    """A sampled request whose top_p below 1 is multiplied by `factor`: the sampler keeps a
    smaller nucleus than asked, every token it draws still inside the asked one."""
    top_p = payload.get("top_p")
    if not sampled(payload) or not isinstance(top_p, int | float) or not 0 < top_p < 1:
        return None
    return {**payload, "top_p": top_p * factor}


def _copied_choice(choice: dict[str, Any], index: int) -> dict[str, Any]:
    copied = copy.deepcopy(choice)
    copied["index"] = index
    return copied


def collapse_choices(payload: Payload) -> Payload | None:
    """An answer with n > 1 choices where every choice is a copy of choice 0 (vLLM #12584's
    class: one output for n > 1, here repeated so the count still adds up)."""
    choices = _choices(payload)
    if len(choices) < 2:
        return None
    first = next((c for c in choices if c.get("index", 0) == 0), choices[0])
    collapsed = copy.deepcopy(payload)
    collapsed["choices"] = [_copied_choice(first, i) for i in range(len(choices))]
    return collapsed


def collapse_choice_events(n: int) -> EventRewrite:
    """A stream rewriter for n > 1: each event of choice 0 is sent once per index, the events
    of the other choices are dropped (their usage-only events are kept)."""

    def rewrite(payload: Payload) -> list[Payload] | None:
        choices = _choices(payload)
        if not choices:
            return None
        if all(c.get("index", 0) == 0 for c in choices):
            events = []
            for i in range(n):
                event = copy.deepcopy(payload)
                event["choices"] = [_copied_choice(c, i) for c in choices]
                events.append(event)
            return events
        kept = [c for c in choices if c.get("index", 0) == 0]
        if kept:
            event = copy.deepcopy(payload)
            event["choices"] = kept
            return rewrite(event)
        return []

    return rewrite
