"""Synthetic GGUF files: a few named tensors behind a realistic header (KV arrays included)."""

from __future__ import annotations

import struct
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

GGUFTensor = tuple[str, int, tuple[int, ...], bytes]  # name, ggml type, shape, raw data
MakeGGUF = Callable[..., Path]


def _string(text: str) -> bytes:
    raw = text.encode()
    return struct.pack("<Q", len(raw)) + raw


def gguf_bytes(tensors: list[GGUFTensor], alignment: int = 32, version: int = 3) -> bytes:
    """A GGUF file holding `tensors`, each data block padded to `alignment`."""
    kv = (
        _string("general.architecture") + struct.pack("<I", 8) + _string("llama"),
        _string("general.alignment") + struct.pack("<II", 4, alignment),
        # A string array and a float array, as the tokenizer stores them.
        _string("tokenizer.ggml.tokens")
        + struct.pack("<IIQ", 9, 8, 2)
        + _string("a")
        + _string("b"),
        _string("tokenizer.ggml.scores")
        + struct.pack("<IIQ", 9, 6, 3)
        + struct.pack("<3f", 1, 2, 3),
    )
    infos, data, cursor = b"", b"", 0
    for name, ggml_type, shape, raw in tensors:
        infos += _string(name) + struct.pack("<I", len(shape))
        infos += b"".join(struct.pack("<Q", dim) for dim in shape)
        infos += struct.pack("<IQ", ggml_type, cursor)
        padded = raw + b"\0" * (-len(raw) % alignment)
        data += padded
        cursor += len(padded)
    head = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kv)) + b"".join(kv) + infos
    return head + b"\0" * (-len(head) % alignment) + data


def f32_tensor(name: str, values: list[float]) -> GGUFTensor:
    return (name, 0, (len(values),), np.asarray(values, dtype="<f4").tobytes())


@pytest.fixture
def make_gguf(tmp_path: Path) -> MakeGGUF:
    def make(tensors: list[GGUFTensor], name: str = "model.gguf", **kwargs: int) -> Path:
        path = tmp_path / name
        path.write_bytes(gguf_bytes(tensors, **kwargs))
        return path

    return make


@pytest.fixture
def tiny_model(make_gguf: MakeGGUF) -> Path:
    """Two blocks' worth of norms plus a quantized and an embedding tensor."""
    return make_gguf(
        [
            ("token_embd.weight", 8, (32, 2), bytes(range(68))),  # Q8_0: 2 blocks of 34 bytes
            f32_tensor("blk.0.attn_norm.weight", [1.0, 2.0, -3.5, 0.25]),
            ("blk.0.attn_q.weight", 3, (32, 1), bytes(range(20))),  # Q4_1: 1 block of 20 bytes
            f32_tensor("blk.0.ffn_norm.weight", [1.0, 1.0, 1.0, 1.0]),
            f32_tensor("blk.1.attn_norm.weight", [0.5, 0.75, 1.5, 3.0, 6.0, 9.0]),
            f32_tensor("blk.3.ffn_norm.weight", [1.0] * 16),
            f32_tensor("output_norm.weight", [1.0, 2.0]),
        ]
    )
