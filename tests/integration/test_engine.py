"""The reference engine itself: it really serves, its bug variants really misbehave, it stops."""

from __future__ import annotations

import json
import os
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import aiohttp
import pytest

from servegate.engine import RunningEngine, answers_completion, start_engine

from .conftest import HANG_THRESHOLD_CHARS

pytestmark = [pytest.mark.engine, pytest.mark.slow]

RESET = {"prompt": "0", "max_tokens": 1, "temperature": 0}


def _post(engine: RunningEngine, path: str, body: dict[str, Any], timeout_s: float = 60) -> Any:
    request = urllib.request.Request(
        engine.base_url + path,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=timeout_s) as response:
        return json.loads(response.read())


@pytest.fixture(scope="module")
def flash_attn_engine(engine_factory: Callable[..., RunningEngine]) -> Iterator[RunningEngine]:
    """The clean weights on llama.cpp's flash-attention kernel."""
    with engine_factory("flash-attn") as engine:
        yield engine


@pytest.fixture(scope="module")
def logit_scale_engine(engine_factory: Callable[..., RunningEngine]) -> Iterator[RunningEngine]:
    """output_norm scaled by 0.8: every next-token distribution flatter."""
    with engine_factory("logit-scale") as engine:
        yield engine


PROSE = (
    "The river rises in the hills to the north of the town and flows south for about forty "
    "kilometres before it reaches the sea. For centuries it carried timber, grain and wool to "
    "the harbour, and the mills along its banks ground flour for the whole region. When the "
    "railway arrived, the boats slowly disappeared, but the old towpath is still used by "
    "walkers and cyclists who follow the water from the bridge in the centre of the town to "
    "the marshes near the coast, where herons and egrets feed at low tide."
)


def _echo_logprobs(engine: RunningEngine, text: str) -> list[float]:
    _post(engine, "/completions", RESET)
    body = {"prompt": text, "max_tokens": 1, "temperature": 0, "echo": True, "logprobs": 1}
    response = _post(engine, "/completions", body)
    n_prompt = response["usage"]["prompt_tokens"]
    logprobs: list[float] = response["choices"][0]["logprobs"]["token_logprobs"][1:n_prompt]
    return logprobs


def _greedy_chat(engine: RunningEngine, content: str, max_tokens: int = 16) -> str:
    # The reset request keeps llama-cpp-python's prefix cache from changing greedy outputs.
    _post(engine, "/completions", RESET)
    body = {
        "messages": [{"role": "user", "content": content}],
        "temperature": 0,
        "max_tokens": max_tokens,
    }
    answer: str = _post(engine, "/chat/completions", body)["choices"][0]["message"]["content"]
    return answer


def test_a_started_engine_answers_a_real_completion(clean_engine: RunningEngine) -> None:
    assert clean_engine.base_url.endswith("/v1")
    assert answers_completion(clean_engine.base_url)
    models = json.loads(
        urllib.request.urlopen(clean_engine.base_url + "/models", timeout=10).read()
    )
    assert [m["id"] for m in models["data"]] == [clean_engine.model]


def test_mixed_dtype_answers_commas_where_clean_answers_text(
    clean_engine: RunningEngine, mixed_dtype_engine: RunningEngine
) -> None:
    clean = _greedy_chat(clean_engine, "Reply with exactly: OK")
    broken = _greedy_chat(mixed_dtype_engine, "Reply with exactly: OK")
    assert sum(ch.isalpha() for ch in clean) > len(clean) // 2
    # e.g. ",- the--------,,,,,": punctuation runs, next to no letters.
    assert broken.count(",") >= 3
    assert sum(ch.isalpha() for ch in broken) <= len(broken) // 4


def test_greedy_output_after_a_reset_request_is_the_same_every_time(
    clean_engine: RunningEngine,
) -> None:
    answers = {
        _greedy_chat(clean_engine, "Reply with exactly: OK", max_tokens=48) for _ in range(3)
    }
    assert len(answers) == 1


async def test_hang_long_holds_a_long_prompt_past_the_client_timeout(
    hang_long_engine: RunningEngine,
) -> None:
    long_chat = {"messages": [{"role": "user", "content": "word " * HANG_THRESHOLD_CHARS}]}
    timeout = aiohttp.ClientTimeout(total=2)
    async with aiohttp.ClientSession(timeout=timeout) as client:
        with pytest.raises(TimeoutError):
            await client.post(f"{hang_long_engine.base_url}/chat/completions", json=long_chat)


async def test_hang_long_still_serves_short_prompts_and_streams(
    hang_long_engine: RunningEngine,
) -> None:
    body = {
        "messages": [{"role": "user", "content": "Hi"}],
        "max_tokens": 4,
        "temperature": 0,
        "stream": True,
    }
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as client,
        client.post(f"{hang_long_engine.base_url}/chat/completions", json=body) as answer,
    ):
        assert answer.status == 200
        events = [line async for line in answer.content if line.startswith(b"data:")]
    assert events[-1].strip() == b"data: [DONE]"
    assert len(events) >= 3


def test_stop_ends_every_engine_process_by_pid() -> None:
    engine = start_engine("clean", fault="hang-long")
    pids = engine.pids
    assert engine.alive()
    engine.stop()
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_flash_attn_scores_text_like_clean_but_not_bit_identically(
    clean_engine: RunningEngine, flash_attn_engine: RunningEngine
) -> None:
    clean = _echo_logprobs(clean_engine, PROSE)
    flash = _echo_logprobs(flash_attn_engine, PROSE)
    deltas = [abs(a - b) for a, b in zip(clean, flash, strict=True)]
    assert max(deltas) > 0.0
    assert sum(deltas) / len(deltas) < 0.2  # measured 0.07 here, 0.05 over the reference texts


def test_logit_scale_keeps_greedy_answers_but_scores_text_worse(
    clean_engine: RunningEngine, logit_scale_engine: RunningEngine
) -> None:
    prompt = "Name the capital of France in one word."
    assert _greedy_chat(logit_scale_engine, prompt) == _greedy_chat(clean_engine, prompt)
    clean = _echo_logprobs(clean_engine, PROSE)
    scaled = _echo_logprobs(logit_scale_engine, PROSE)
    nll_increase = (sum(clean) - sum(scaled)) / len(clean)
    assert nll_increase > 0.02  # measured +0.065 nats/token over the reference texts
