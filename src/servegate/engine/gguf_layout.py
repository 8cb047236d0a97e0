"""Where each tensor lives inside a GGUF file: just enough of the format to patch weights in place.

Layout (GGUF v2/v3, little-endian): magic ``GGUF``, version u32, tensor count u64, KV count u64,
the KV metadata (skipped here except ``general.alignment``), one info record per tensor (name,
dims, ggml type, offset relative to the data section), padding to the alignment, then the data.
Version 1 used u32 counts and lengths; it predates every model we ship and is refused.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32

# ggml type id -> (name, elements per block, bytes per block); sizes from ggml's type traits.
GGML_TYPES: dict[int, tuple[str, int, int]] = {
    0: ("F32", 1, 4),
    1: ("F16", 1, 2),
    2: ("Q4_0", 32, 18),
    3: ("Q4_1", 32, 20),
    6: ("Q5_0", 32, 22),
    7: ("Q5_1", 32, 24),
    8: ("Q8_0", 32, 34),
    9: ("Q8_1", 32, 36),
    10: ("Q2_K", 256, 84),
    11: ("Q3_K", 256, 110),
    12: ("Q4_K", 256, 144),
    13: ("Q5_K", 256, 176),
    14: ("Q6_K", 256, 210),
    15: ("Q8_K", 256, 292),
    24: ("I8", 1, 1),
    25: ("I16", 1, 2),
    26: ("I32", 1, 4),
    27: ("I64", 1, 8),
    28: ("F64", 1, 8),
    30: ("BF16", 1, 2),
}

# GGUF metadata value type id -> struct format of a scalar (strings and arrays handled apart).
_SCALARS: dict[int, str] = {
    0: "<B",
    1: "<b",
    2: "<H",
    3: "<h",
    4: "<I",
    5: "<i",
    6: "<f",
    7: "<?",
    10: "<Q",
    11: "<q",
    12: "<d",
}
_STRING = 8
_ARRAY = 9


class GGUFFormatError(ValueError):
    """The file is not a GGUF file this reader understands."""


@dataclass(frozen=True)
class TensorInfo:
    """One tensor: its name, shape, ggml type and absolute byte range in the file."""

    name: str
    shape: tuple[int, ...]
    ggml_type: int
    offset: int  # absolute: data section start + the info's relative offset
    nbytes: int

    @property
    def type_name(self) -> str:
        return GGML_TYPES[self.ggml_type][0] if self.ggml_type in GGML_TYPES else "?"

    @property
    def n_elements(self) -> int:
        count = 1
        for dim in self.shape:
            count *= dim
        return count


@dataclass(frozen=True)
class GGUFLayout:
    """The parsed header of a GGUF file: version, alignment, data start and tensor table."""

    version: int
    alignment: int
    data_offset: int
    tensors: tuple[TensorInfo, ...]

    def tensor(self, name: str) -> TensorInfo:
        """The tensor called `name`; KeyError naming it otherwise."""
        for info in self.tensors:
            if info.name == name:
                return info
        raise KeyError(name)


class _Reader:
    def __init__(self, handle: BinaryIO) -> None:
        self._handle = handle

    def unpack(self, fmt: str) -> int | float | bool:
        size = struct.calcsize(fmt)
        raw = self._handle.read(size)
        if len(raw) != size:
            raise GGUFFormatError("file ends inside the header")
        value: int | float | bool = struct.unpack(fmt, raw)[0]
        return value

    def u32(self) -> int:
        return int(self.unpack("<I"))

    def u64(self) -> int:
        return int(self.unpack("<Q"))

    def string(self) -> str:
        length = self.u64()
        raw = self._handle.read(length)
        if len(raw) != length:
            raise GGUFFormatError("file ends inside a string")
        return raw.decode("utf-8", errors="replace")

    def skip(self, nbytes: int) -> None:
        self._handle.seek(nbytes, 1)

    def value(self, value_type: int) -> object:
        """Read one metadata value; arrays of fixed-size scalars are skipped, not decoded."""
        if value_type in _SCALARS:
            return self.unpack(_SCALARS[value_type])
        if value_type == _STRING:
            return self.string()
        if value_type == _ARRAY:
            item_type, count = self.u32(), self.u64()
            if item_type in _SCALARS:
                # Tokenizer arrays hold ~50k entries; seeking past them keeps parsing instant.
                self.skip(struct.calcsize(_SCALARS[item_type]) * count)
                return None
            for _ in range(count):
                self.value(item_type)
            return None
        raise GGUFFormatError(f"unknown metadata value type {value_type}")

    def tell(self) -> int:
        return self._handle.tell()


def _tensor_nbytes(ggml_type: int, shape: tuple[int, ...]) -> int | None:
    if ggml_type not in GGML_TYPES:
        return None
    _, block_elems, block_bytes = GGML_TYPES[ggml_type]
    # ggml stores rows of ne[0] elements; quantized rows are whole blocks.
    row = shape[0] if shape else 1
    rows = 1
    for dim in shape[1:]:
        rows *= dim
    return (row // block_elems) * block_bytes * rows


def read_layout(path: Path) -> GGUFLayout:
    """Parse the header of the GGUF file at `path` (reads only the header, never the weights)."""
    file_size = path.stat().st_size
    with path.open("rb") as handle:
        if handle.read(4) != MAGIC:
            raise GGUFFormatError(f"{path} is not a GGUF file (bad magic)")
        reader = _Reader(handle)
        version = reader.u32()
        if version not in (2, 3):
            raise GGUFFormatError(f"{path}: GGUF version {version} is not supported (2 or 3)")
        n_tensors, n_kv = reader.u64(), reader.u64()
        alignment = DEFAULT_ALIGNMENT
        for _ in range(n_kv):
            key = reader.string()
            value = reader.value(reader.u32())
            if key == "general.alignment" and isinstance(value, int):
                alignment = value
        raw_infos: list[tuple[str, tuple[int, ...], int, int]] = []
        for _ in range(n_tensors):
            name = reader.string()
            n_dims = reader.u32()
            shape = tuple(reader.u64() for _ in range(n_dims))
            raw_infos.append((name, shape, reader.u32(), reader.u64()))
        data_offset = -(-reader.tell() // alignment) * alignment
    return GGUFLayout(version, alignment, data_offset, _resolve(raw_infos, data_offset, file_size))


def _resolve(
    raw_infos: list[tuple[str, tuple[int, ...], int, int]], data_offset: int, file_size: int
) -> tuple[TensorInfo, ...]:
    # Unknown types get their size from the gap to the next tensor (or the end of the file).
    starts = sorted({data_offset + rel for _, _, _, rel in raw_infos} | {file_size})
    tensors = []
    for name, shape, ggml_type, rel in raw_infos:
        start = data_offset + rel
        nbytes = _tensor_nbytes(ggml_type, shape)
        if nbytes is None:
            nbytes = next(s for s in starts if s > start) - start
        if start + nbytes > file_size:
            raise GGUFFormatError(f"tensor {name} runs past the end of the file")
        tensors.append(TensorInfo(name, shape, ggml_type, start, nbytes))
    return tuple(tensors)
