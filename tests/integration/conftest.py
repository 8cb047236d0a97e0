"""Reference engines shared by the integration tests, started once per session on loopback."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from servegate.engine import RunningEngine

# Short enough for fast tests, long enough that a prompt of a few sentences passes.
HANG_THRESHOLD_CHARS = 500


def _engine_or_skip(variant: str, fault: str | None = None, **options: int) -> RunningEngine:
    if importlib.util.find_spec("llama_cpp") is None:
        pytest.skip("reference engine not installed (scripts/setup.sh engine)")
    from servegate.engine import FaultOptions, start_engine

    return start_engine(variant, fault=fault, fault_options=FaultOptions(**options))


@pytest.fixture(scope="session")
def clean_engine() -> Iterator[RunningEngine]:
    """The shipped model with default flags."""
    with _engine_or_skip("clean") as engine:
        yield engine


@pytest.fixture(scope="session")
def mixed_dtype_engine() -> Iterator[RunningEngine]:
    """attn_norm F32 weights read back as bf16: answers runs of commas."""
    with _engine_or_skip("mixed-dtype") as engine:
        yield engine


@pytest.fixture(scope="session")
def hang_long_engine() -> Iterator[RunningEngine]:
    """The clean model behind the hang-long fault (threshold HANG_THRESHOLD_CHARS)."""
    with _engine_or_skip("clean", "hang-long", threshold_chars=HANG_THRESHOLD_CHARS) as engine:
        yield engine
