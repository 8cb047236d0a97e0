"""A short, bounded run of the SSE fuzz entry point (fuzz/fuzz_sse.py runs longer standalone)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

FUZZ = Path(__file__).resolve().parents[3] / "fuzz" / "fuzz_sse.py"


def load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("fuzz_sse", FUZZ)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_fuzzed_streams_parse_the_same_however_cut_and_never_crash_the_assembler() -> None:
    load().run(examples=100, seed_value=20260711)
