"""Embeddings from the reference engine, patched into its server process (embeddings mode only).

llama-cpp-python 0.3.16 serves `/v1/embeddings` badly for a generative model such as SmolLM2:
- pooling: its server has no pooling flag and `Llama` leaves `pooling_type` unspecified, so
  llama.cpp takes the model's own, which for a causal LM is NONE: each input comes back as one
  576-float vector *per token* (a list of lists, not an OpenAI embedding);
- batching: `Llama.embed` puts every input of a request into one batch as its own sequence, but
  the context is created with llama.cpp's default `n_seq_max = 1`, so any request with two or
  more inputs fails with `llama_decode returned -1` (HTTP 500, "invalid seq_id[..] = 1 >= 1").

`install(Llama, pooling)` gives `Llama` a pooling type (mean by default, as sentence embedders of
decoder models use) unless one is passed, and makes `embed` handle a list one input at a time
(each its own decode on sequence 0), so `/v1/embeddings` answers one pooled vector per input.
Measured on SmolLM2-135M Q4_1: 576 dimensions; the same text twice gives bit-identical vectors.
Completions still work in this mode, but the generative engine keeps its own flags
(`--logits_all`), so serve embeddings from a separate engine (`start_engine(embeddings=True)`).
"""

from __future__ import annotations

import functools
from typing import Any

POOLING = {"none": 0, "mean": 1, "cls": 2, "last": 3}
_INSTALLED = "_servegate_embedding_mode"


def install(llama_class: Any, pooling: str = "mean") -> None:
    """Patch `llama_class` (llama_cpp.Llama): `pooling` unless given, and one input per decode."""
    if getattr(llama_class, _INSTALLED, False):
        return
    pooling_type = POOLING[pooling]
    original_init = llama_class.__init__
    original_embed = llama_class.embed

    @functools.wraps(original_init)
    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("pooling_type", pooling_type)
        original_init(self, *args, **kwargs)

    @functools.wraps(original_embed)
    def embed(self: Any, input: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(input, str) or len(input) <= 1:
            return original_embed(self, input, *args, **kwargs)
        counted = bool(kwargs.get("return_count"))
        vectors: list[Any] = []
        tokens = 0
        for text in input:
            one = original_embed(self, [text], *args, **kwargs)
            if counted:
                one, n = one
                tokens += n
            vectors.extend(one)
        return (vectors, tokens) if counted else vectors

    llama_class.__init__ = init
    llama_class.embed = embed
    setattr(llama_class, _INSTALLED, True)
