from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest

from servegate.engine.gguf_layout import GGUFFormatError, read_layout

from .conftest import MakeGGUF, f32_tensor, gguf_bytes


def test_each_tensor_is_found_by_name_with_type_shape_and_bytes(tiny_model: Path) -> None:
    layout = read_layout(tiny_model)
    norm = layout.tensor("blk.1.attn_norm.weight")
    assert (norm.type_name, norm.shape, norm.nbytes) == ("F32", (6,), 24)
    raw = tiny_model.read_bytes()[norm.offset : norm.offset + norm.nbytes]
    assert np.frombuffer(raw, dtype="<f4").tolist() == [0.5, 0.75, 1.5, 3.0, 6.0, 9.0]


@pytest.mark.parametrize(
    ("name", "type_name", "nbytes"),
    [("token_embd.weight", "Q8_0", 68), ("blk.0.attn_q.weight", "Q4_1", 20)],
    ids=["q8_0-two-blocks", "q4_1-one-block"],
)
def test_quantized_tensor_sizes_follow_the_block_layout(
    tiny_model: Path, name: str, type_name: str, nbytes: int
) -> None:
    info = read_layout(tiny_model).tensor(name)
    assert (info.type_name, info.nbytes) == (type_name, nbytes)


def test_data_section_starts_on_the_declared_alignment(make_gguf: MakeGGUF) -> None:
    path = make_gguf([f32_tensor("a", [1.0]), f32_tensor("b", [2.0, 3.0])], alignment=64)
    layout = read_layout(path)
    assert layout.alignment == 64
    assert layout.data_offset % 64 == 0
    second = layout.tensor("b")
    assert second.offset == layout.data_offset + 64
    assert path.read_bytes()[second.offset : second.offset + 8] == struct.pack("<2f", 2.0, 3.0)


def test_unknown_tensor_type_is_sized_by_the_gap_to_the_next_tensor(make_gguf: MakeGGUF) -> None:
    path = make_gguf([("odd", 99, (5,), b"\1" * 40), f32_tensor("after", [1.0])])
    assert read_layout(path).tensor("odd").nbytes == 64  # 40 bytes padded to the alignment


def test_a_missing_tensor_name_raises_key_error_naming_it(tiny_model: Path) -> None:
    with pytest.raises(KeyError, match="nope"):
        read_layout(tiny_model).tensor("nope")


@pytest.mark.parametrize(
    "content",
    [
        b"GGML" + bytes(60),
        gguf_bytes([f32_tensor("a", [1.0])], version=1),
        gguf_bytes([f32_tensor("a", [1.0])])[:30],
    ],
    ids=["bad-magic", "version-1", "truncated-header"],
)
def test_files_this_reader_cannot_trust_are_refused(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "bad.gguf"
    path.write_bytes(content)
    with pytest.raises(GGUFFormatError):
        read_layout(path)


def test_a_tensor_running_past_the_end_of_the_file_is_refused(tmp_path: Path) -> None:
    content = gguf_bytes([f32_tensor("a", [1.0] * 16)])
    path = tmp_path / "cut.gguf"
    path.write_bytes(content[:-8])
    with pytest.raises(GGUFFormatError, match="past the end"):
        read_layout(path)
