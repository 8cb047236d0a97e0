from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from servegate.engine.logprob_fix import (
    ROW_CHUNK,
    completion_logprobs,
    install,
    spelled_prefix,
)

# Token id -> bytes; 5 and 6 are the two halves of "é", 0 ends generation, 9 is BOS.
PIECES = {
    0: b"",
    1: b"A",
    2: b"B",
    3: b"C",
    4: b" ",
    5: b"\xc3",
    6: b"\xa9",
    7: b"AB",
    8: b"!",
    9: b"",
}
VOCAB = 10


def detokenize(tokens: list[int]) -> bytes:
    return b"".join(PIECES[token] for token in tokens)


def log_softmax(row: np.ndarray) -> np.ndarray:
    shifted = row.astype(np.float64) - row.max()
    return shifted - np.log(np.exp(shifted).sum())


def scores(rows: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(scale=3.0, size=(rows, VOCAB)).astype(np.float32)


def test_the_token_at_position_a_is_scored_by_row_a_minus_1() -> None:
    logits = scores(5)
    tokens = [1, 2, 3, 4]
    out = completion_logprobs(tokens, logits, 1, detokenize, start=1)
    expected = [log_softmax(logits[a - 1])[t] for a, t in enumerate(tokens, start=1)]
    assert out["token_logprobs"] == pytest.approx(expected, abs=1e-12)


def test_a_sequence_start_has_no_row_and_gets_none() -> None:
    logits = scores(4)
    out = completion_logprobs([1, 2, 3], logits, 2, detokenize)
    assert out["token_logprobs"][0] is None
    assert out["top_logprobs"][0] is None
    assert out["token_logprobs"][1] == pytest.approx(log_softmax(logits[0])[2])


@pytest.mark.parametrize("start", [0, 1], ids=["no-bos", "after-bos"])
def test_the_first_echoed_token_is_none_even_when_a_bos_row_scores_it(start: int) -> None:
    logits = scores(5)
    out = completion_logprobs([1, 2, 3], logits, 2, detokenize, start=start, echo=True)
    assert out["token_logprobs"][0] is None
    assert out["top_logprobs"][0] is None
    assert out["token_logprobs"][1] == pytest.approx(log_softmax(logits[start])[2])
    assert out["token_logprobs"][2] == pytest.approx(log_softmax(logits[start + 1])[3])


def test_top_logprobs_hold_the_k_likeliest_tokens_and_the_chosen_one() -> None:
    row = np.array([[0.0, 5.0, 4.0, 3.0, -1.0, -2.0, -3.0, 2.0, 1.0, 0.5]], dtype=np.float32)
    expected = log_softmax(row[0])
    out = completion_logprobs([4], row, 2, detokenize, start=1)
    assert list(out["top_logprobs"][0] or {}) == ["A", "B", " "]  # likeliest first, then chosen
    assert (out["top_logprobs"][0] or {}) == pytest.approx(
        {"A": expected[1], "B": expected[2], " ": expected[4]}
    )
    assert out["token_logprobs"] == pytest.approx([expected[4]])


def test_zero_top_logprobs_leaves_only_the_chosen_token() -> None:
    out = completion_logprobs([3], scores(1), 0, detokenize, start=1)
    assert list(out["top_logprobs"][0] or {}) == ["C"]


def test_text_offsets_count_a_split_character_once_its_last_byte_arrives() -> None:
    # "A é!" with "é" split over tokens 5 and 6; the completion starts at character 10.
    out = completion_logprobs([1, 4, 5, 6, 8], scores(6), 1, detokenize, start=1, text_offset=10)
    assert out["tokens"] == ["A", " ", "", "", "!"]
    assert out["text_offset"] == [10, 11, 12, 12, 13]


def test_matches_a_plain_per_token_computation_across_row_chunks() -> None:
    n = ROW_CHUNK + 7
    rng = np.random.default_rng(3)
    logits = rng.normal(scale=4.0, size=(n + 1, VOCAB)).astype(np.float32)
    tokens = rng.integers(0, VOCAB, size=n).tolist()
    out = completion_logprobs(tokens, logits, 3, lambda ts: f"<{ts[0]}>".encode(), start=1)
    for i, token in enumerate(tokens):
        expected = log_softmax(logits[i])
        assert out["token_logprobs"][i] == pytest.approx(expected[token], abs=1e-9)
        top3 = np.argsort(-expected, kind="stable")[:3]
        keys = list(out["top_logprobs"][i] or {})
        assert keys[:3] == [f"<{t}>" for t in top3]
        assert (out["top_logprobs"][i] or {})[f"<{token}>"] == out["token_logprobs"][i]


def test_too_few_rows_for_the_tokens_is_an_error() -> None:
    with pytest.raises(ValueError, match="need more than 2 rows"):
        completion_logprobs([1, 2, 3], scores(2), 1, detokenize, start=1)


@pytest.mark.parametrize(
    ("tokens", "text", "expected"),
    [
        ([1, 2, 3], "ABC", (3, True)),
        ([1, 7, 3], "AA", (1, True)),  # a stop sequence cut the text inside token 7
        ([1, 2, 8], "AB", (2, True)),  # cut exactly at a token boundary
        ([1, 4, 5], "A ", (2, True)),  # an incomplete trailing character is not in the text
        ([1, 3, 2], "ABC", (1, False)),
        ([1, 2], "ABC", (2, False)),
        ([1, 0, 2], "AB", (3, True)),  # empty pieces (control tokens) spell nothing
    ],
    ids=[
        "exact",
        "stop-mid-token",
        "stop-at-boundary",
        "partial-char",
        "mismatch",
        "short",
        "empty",
    ],
)
def test_spelled_prefix_counts_the_tokens_that_line_up_with_the_text(
    tokens: list[int], text: str, expected: tuple[int, bool]
) -> None:
    assert spelled_prefix(tokens, text, detokenize) == expected


class FakeModel:
    def __init__(self, add_bos: bool) -> None:
        self.add_bos = add_bos

    def add_bos_token(self) -> bool:
        return self.add_bos

    def token_cls(self) -> int:
        return -1


class FakeLlama:
    """Upstream's completion loop in miniature: scripted tokens, stop strings, end-of-generation."""

    _logits_all = True

    def __init__(self, script: list[int], *, add_bos: bool = False) -> None:
        self.script = script
        self._model = FakeModel(add_bos)
        self.all_scores = scores(32, seed=7)
        self.evaluated: list[int] = []
        self.seen_logprobs: list[int | None] = []

    def token_bos(self) -> int:
        return 9

    def detokenize(self, tokens: list[int]) -> bytes:
        return detokenize(tokens)

    @property
    def _input_ids(self) -> np.ndarray:
        return np.array(self.evaluated, dtype=np.intc)

    @property
    def _scores(self) -> np.ndarray:
        return self.all_scores[: len(self.evaluated)]

    def generate(self, tokens: list[int]) -> Iterator[int]:
        self.evaluated = list(tokens)
        for token in self.script:
            yield token
            self.evaluated.append(token)  # evaluated when the next token is asked for

    def create_completion(
        self,
        prompt: str,
        suffix: str | None = None,
        max_tokens: int = 16,
        logprobs: int | None = None,
        echo: bool = False,
        stop: str | None = None,
        stream: bool = False,
    ) -> dict[str, Any]:
        self.seen_logprobs.append(logprobs)
        by_char = {PIECES[t].decode(): t for t in (1, 2, 3, 4, 8)}
        prompt_tokens = [9] * self._model.add_bos + [by_char[ch] for ch in prompt]
        completion: list[int] = []
        text = b""
        for token in self.generate(prompt_tokens):
            if token == 0:
                break
            completion.append(token)
            text = detokenize(completion)
            if stop and stop.encode() in text:
                text = text[: text.index(stop.encode())]
                break
            if len(completion) >= max_tokens:
                break
        body = text.decode(errors="ignore")
        return {
            "choices": [{"text": prompt + body if echo else body, "logprobs": "upstream"}],
            "usage": {"prompt_tokens": len(prompt_tokens), "completion_tokens": len(completion)},
        }


class FixedLlama(FakeLlama):
    pass


install(FixedLlama)


def test_the_fix_calls_upstream_without_logprobs_and_scores_the_generated_tokens() -> None:
    llama = FixedLlama([1, 2, 3, 1, 2])
    out = llama.create_completion("AB", max_tokens=3, logprobs=2)
    logprobs = out["choices"][0]["logprobs"]
    assert llama.seen_logprobs == [None]
    assert logprobs["tokens"] == ["A", "B", "C"]
    assert logprobs["text_offset"] == [2, 3, 4]
    expected = [log_softmax(llama.all_scores[1 + j])[t] for j, t in enumerate([1, 2, 3])]
    assert logprobs["token_logprobs"] == pytest.approx(expected)


def test_the_end_of_generation_token_is_not_reported() -> None:
    out = FixedLlama([1, 2, 0]).create_completion("A", logprobs=1)
    assert out["choices"][0]["logprobs"]["tokens"] == ["A", "B"]


def test_a_token_that_runs_past_a_stop_sequence_is_left_out() -> None:
    out = FixedLlama([1, 7, 3]).create_completion("A", logprobs=1, stop="B")
    assert out["choices"][0]["text"] == "AA"
    assert out["choices"][0]["logprobs"]["tokens"] == ["A"]


def test_echo_reports_the_prompt_without_bos_then_the_completion() -> None:
    llama = FixedLlama([3, 0], add_bos=True)
    out = llama.create_completion("AB", echo=True, logprobs=1)
    logprobs = out["choices"][0]["logprobs"]
    assert out["choices"][0]["text"] == "ABC"
    assert logprobs["tokens"] == ["A", "B", "C"]
    assert logprobs["text_offset"] == [0, 1, 2]
    assert logprobs["token_logprobs"][0] is None
    # Positions: BOS 0, A 1, B 2, C 3; B is scored by row 1 and C by row 2.
    assert logprobs["token_logprobs"][1:] == pytest.approx(
        [log_softmax(llama.all_scores[1])[2], log_softmax(llama.all_scores[2])[3]]
    )


def test_streaming_and_requests_without_logprobs_go_to_upstream_unchanged() -> None:
    llama = FixedLlama([1, 0])
    assert llama.create_completion("A", logprobs=1, stream=True)["choices"][0]["logprobs"] == (
        "upstream"
    )
    assert llama.create_completion("A")["choices"][0]["logprobs"] == "upstream"
    assert llama.seen_logprobs == [1, None]


def test_tokens_that_do_not_spell_the_text_are_cut_and_reported_on_stderr(
    capsys: pytest.CaptureFixture[str],
) -> None:
    class Garbling(FixedLlama):
        def detokenize(self, tokens: list[int]) -> bytes:
            return b"?" if tokens == [2] else detokenize(tokens)

    out = Garbling([1, 2, 3, 0]).create_completion("A", logprobs=1)
    assert out["choices"][0]["logprobs"]["tokens"] == ["A"]
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "do not spell the text" in err


def test_installing_twice_wraps_once() -> None:
    wrapped = FixedLlama.create_completion
    install(FixedLlama)
    assert FixedLlama.create_completion is wrapped
    assert FakeLlama.create_completion is not wrapped  # the fix patches only the class it is given
