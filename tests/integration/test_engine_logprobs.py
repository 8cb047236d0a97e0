"""The reference engine's logprobs: aligned with teacher forcing, fast, and free of side effects.

The truth is computed in this process with llama_cpp itself: evaluate the tokens, then the
logprob of token i is log_softmax(row i-1)[token i].
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from servegate.engine import RunningEngine, shipped_model_path

pytestmark = [pytest.mark.engine, pytest.mark.slow]

RESET = {"prompt": "0", "max_tokens": 1, "temperature": 0}
# About 200 SmolLM2 tokens of plain English.
ENGLISH = (
    "Honey bees live in colonies that can hold tens of thousands of workers, a few hundred "
    "drones and a single queen. The workers are all female, and the tasks they perform change "
    "as they grow older. Young bees clean the cells of the comb and feed the larvae, while "
    "middle-aged bees build new comb from wax, guard the entrance and fan their wings to cool "
    "the hive. Only in the last weeks of their lives do workers fly out to collect nectar, "
    "pollen and water. A forager that finds a rich patch of flowers returns to the hive and "
    "performs a dance on the comb; the angle of the dance tells her sisters the direction of "
    "the food relative to the sun, and its length tells them how far away it is. In summer a "
    "worker lives for about six weeks, but bees born in autumn can survive the whole winter, "
    "clustering together and shivering their flight muscles to keep the queen warm."
)
STORY = "Once upon a time, in a small village by the sea,"


def _post(engine: RunningEngine, path: str, body: dict[str, Any]) -> Any:
    request = urllib.request.Request(
        engine.base_url + path,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=120) as response:
        return json.loads(response.read())


def _fresh(engine: RunningEngine, path: str, body: dict[str, Any]) -> Any:
    # The reset request keeps llama-cpp-python's prefix cache from changing the numerics.
    _post(engine, "/completions", RESET)
    return _post(engine, path, body)


def _echo(engine: RunningEngine, text: str) -> dict[str, Any]:
    body = {"prompt": text, "max_tokens": 1, "temperature": 0, "echo": True, "logprobs": 1}
    return dict(_fresh(engine, "/completions", body))


def _log_softmax(rows: np.ndarray) -> np.ndarray:
    shifted = rows.astype(np.float64) - rows.max(axis=1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))


@pytest.fixture(scope="module")
def llm() -> Iterator[Any]:
    llama_cpp = pytest.importorskip("llama_cpp")
    model = llama_cpp.Llama(str(shipped_model_path()), logits_all=True, n_ctx=4096, verbose=False)
    yield model
    model.close()


def test_echo_logprobs_equal_teacher_forcing_of_the_same_text(
    clean_engine: RunningEngine, llm: Any
) -> None:
    tokens = llm.tokenize(ENGLISH.encode(), add_bos=False, special=True)
    llm.reset()
    llm.eval(tokens)
    rows = _log_softmax(llm._scores)
    truth = [rows[i - 1, token] for i, token in enumerate(tokens) if i > 0]

    response = _echo(clean_engine, ENGLISH)
    logprobs = response["choices"][0]["logprobs"]
    n_prompt = response["usage"]["prompt_tokens"]
    assert 180 <= n_prompt == len(tokens) <= 240
    assert logprobs["token_logprobs"][0] is None
    assert "".join(logprobs["tokens"][:n_prompt]) == ENGLISH
    served = np.array(logprobs["token_logprobs"][1:n_prompt])
    assert np.abs(served - truth).max() < 1e-3


def test_generation_logprobs_equal_token_by_token_teacher_forcing(
    clean_engine: RunningEngine, llm: Any
) -> None:
    body = {"prompt": STORY, "max_tokens": 24, "temperature": 0, "logprobs": 1}
    response = _fresh(clean_engine, "/completions", body)
    served = response["choices"][0]["logprobs"]["token_logprobs"]
    prompt = llm.tokenize(STORY.encode(), add_bos=False, special=True)
    completion = llm.tokenize((STORY + response["choices"][0]["text"]).encode(), False, True)
    completion = completion[len(prompt) :]
    # Decoding evaluates one token at a time; so does the truth (batches round differently).
    llm.reset()
    llm.eval(prompt)
    for token in completion:
        llm.eval([token])
    rows = _log_softmax(llm._scores)
    truth = [rows[len(prompt) - 1 + j, token] for j, token in enumerate(completion)]
    pieces = [llm.detokenize([token]).decode() for token in completion]
    assert pieces == response["choices"][0]["logprobs"]["tokens"]
    assert len(served) == len(truth) == 24
    assert np.abs(np.array(served) - truth).max() < 1e-3


def test_generation_logprobs_match_the_echo_of_prompt_plus_completion(
    clean_engine: RunningEngine,
) -> None:
    body = {"prompt": STORY, "max_tokens": 24, "temperature": 0, "logprobs": 1}
    generated = _fresh(clean_engine, "/completions", body)["choices"][0]
    echoed = _echo(clean_engine, STORY + generated["text"])
    n_prompt = echoed["usage"]["prompt_tokens"]
    n = len(generated["logprobs"]["tokens"])
    echo_part = {k: v[:n_prompt][-n:] for k, v in echoed["choices"][0]["logprobs"].items()}
    assert echo_part["tokens"] == generated["logprobs"]["tokens"]
    error = np.abs(
        np.array(echo_part["token_logprobs"]) - np.array(generated["logprobs"]["token_logprobs"])
    )
    # Batched (echo) and one-by-one (generation) evaluation differ by a few hundredths of a nat
    # (measured mean 0.015-0.033); pairing each token with its neighbour's row gives 0.4-0.9.
    assert error.mean() < 0.06


def test_chat_top_logprobs_come_back_and_contain_the_chosen_token(
    clean_engine: RunningEngine,
) -> None:
    body = {
        "messages": [{"role": "user", "content": "Name three colours."}],
        "max_tokens": 12,
        "temperature": 0,
        "logprobs": True,
        "top_logprobs": 5,
    }
    response = _fresh(clean_engine, "/chat/completions", body)
    choice = response["choices"][0]
    content = choice["logprobs"]["content"]
    assert "".join(entry["token"] for entry in content) == choice["message"]["content"]
    assert len(content) == response["usage"]["completion_tokens"] > 3
    for entry in content:
        top = {alt["token"]: alt["logprob"] for alt in entry["top_logprobs"]}
        assert 5 <= len(top) <= 6
        assert top[entry["token"]] == entry["logprob"] <= 0.0
        likeliest = [alt["logprob"] for alt in entry["top_logprobs"]][:5]
        assert likeliest == sorted(likeliest, reverse=True)


@pytest.mark.parametrize(
    ("path", "body", "unspelled"),
    [
        ("/completions", {"prompt": STORY, "max_tokens": 24}, ""),
        ("/completions", {"prompt": STORY, "max_tokens": 24, "stop": [" wise"]}, ""),
        # The stop string starts inside the token " wise": that token is not reported.
        ("/completions", {"prompt": STORY, "max_tokens": 24, "stop": ["wise"]}, " "),
        ("/completions", {"prompt": STORY, "max_tokens": 8, "echo": True}, ""),
        ("/chat/completions", {"messages": [{"role": "user", "content": "Say hi."}]}, ""),
    ],
    ids=["completion", "stop-at-token-start", "stop-inside-token", "echo", "chat"],
)
def test_asking_for_logprobs_changes_neither_the_text_nor_the_token_count(
    clean_engine: RunningEngine, path: str, body: dict[str, Any], unspelled: str
) -> None:
    chat = path == "/chat/completions"
    body = {**body, "temperature": 0, "max_tokens": 16} if chat else {**body, "temperature": 0}
    plain = _fresh(clean_engine, path, body)
    extra = {"logprobs": True, "top_logprobs": 2} if chat else {"logprobs": 2}
    scored = _fresh(clean_engine, path, {**body, **extra})
    assert scored["usage"] == plain["usage"]
    choice = scored["choices"][0]
    assert choice["finish_reason"] == plain["choices"][0]["finish_reason"]
    if chat:
        text = choice["message"]["content"]
        assert text == plain["choices"][0]["message"]["content"]
        tokens = [entry["token"] for entry in choice["logprobs"]["content"]]
    else:
        text = choice["text"]
        assert text == plain["choices"][0]["text"]
        tokens = choice["logprobs"]["tokens"]
    assert "".join(tokens) + unspelled == text
