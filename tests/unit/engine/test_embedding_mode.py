"""embedding_mode on a stand-in for llama_cpp.Llama: pooling given by default, one input per decode.

The stand-in behaves as llama-cpp-python 0.3.16 does with `n_seq_max = 1`: `embed` of a list of
two or more inputs fails (`llama_decode returned -1`); the real engine is exercised in
tests/integration/test_embeddings.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from servegate.engine import embedding_mode


def stand_in() -> type:
    class Llama:
        def __init__(self, model_path: str, **kwargs: Any) -> None:
            self.kwargs = kwargs
            self.decodes: list[list[str]] = []

        def embed(self, input: Any, normalize: bool = False, return_count: bool = False) -> Any:
            texts = [input] if isinstance(input, str) else list(input)
            if len(texts) > 1:
                raise RuntimeError("llama_decode returned -1")
            self.decodes.append(texts)
            vectors = [[float(len(t)), 1.0] for t in texts]
            out = vectors[0] if isinstance(input, str) else vectors
            return (out, sum(len(t) for t in texts)) if return_count else out

    return Llama


def test_several_inputs_are_embedded_one_decode_each_in_order_with_their_token_count() -> None:
    llama = stand_in()
    embedding_mode.install(llama)
    model = llama("m.gguf")
    vectors, tokens = model.embed(["ab", "cde", "f"], return_count=True)
    assert vectors == [[2.0, 1.0], [3.0, 1.0], [1.0, 1.0]]
    assert tokens == 6
    assert model.decodes == [["ab"], ["cde"], ["f"]]
    assert model.embed("xy") == [2.0, 1.0]  # a single string is passed through as it was


@pytest.mark.parametrize(("pooling", "value"), [("mean", 1), ("last", 3)])
def test_the_pooling_is_given_unless_the_caller_sets_one(pooling: str, value: int) -> None:
    llama = stand_in()
    embedding_mode.install(llama, pooling)
    assert llama("m.gguf").kwargs["pooling_type"] == value
    assert llama("m.gguf", pooling_type=2).kwargs["pooling_type"] == 2


def test_installing_twice_wraps_once() -> None:
    llama = stand_in()
    embedding_mode.install(llama)
    embed = llama.embed
    embedding_mode.install(llama, "last")
    assert llama.embed is embed
    assert llama("m.gguf").kwargs["pooling_type"] == 1


def test_without_it_the_stand_in_fails_like_the_engine() -> None:
    with pytest.raises(RuntimeError, match="llama_decode returned -1"):
        stand_in()("m.gguf").embed(["a", "b"])
