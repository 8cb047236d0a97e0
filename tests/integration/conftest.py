"""Reference engines shared by the integration tests, started once per session on loopback."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from servegate.engine import RunningEngine

# Short enough for fast tests, long enough that a prompt of a few sentences passes.
HANG_THRESHOLD_CHARS = 500


def _engine_or_skip(variant: str, fault: str | None = None, **options: int) -> RunningEngine:
    if importlib.util.find_spec("llama_cpp") is None:
        # In CI a missing engine is a broken set-up, never a quiet skip.
        if os.environ.get("CI"):
            pytest.fail("reference engine not installed in CI (scripts/setup.sh dev)")
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


@pytest.fixture(scope="session")
def benign_engine() -> Iterator[RunningEngine]:
    """The benign config change (same weights, mmap off): same answers, same speed."""
    from servegate.engine import BENIGN_VARIANT

    with _engine_or_skip(BENIGN_VARIANT) as engine:
        yield engine
