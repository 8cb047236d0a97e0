"""Peak memory of a launched process group: RSS from /proc, GPU memory from nvidia-smi.

No GPU on these machines: nvidia-smi is a stand-in script printing its documented CSV shapes
(`--format=csv,noheader[,nounits]`). The real tool's output was not checked here."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from servegate.engine.process import spawn, stop_group
from servegate.environment.host import gpus
from servegate.managed.memory import NOT_LISTED, MemorySampler, group_pids, rss_mb


@pytest.fixture
def sleeper(tmp_path: Path) -> Iterator[int]:
    """A process leading its own group, as a managed engine does."""
    child = spawn([sys.executable, "-c", "import time; time.sleep(60)"], tmp_path / "log")
    yield child.pid
    stop_group(child, 5)


def _fake_smi(folder: Path, monkeypatch: pytest.MonkeyPatch, body: str) -> None:
    smi = folder / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\n{body}\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")


def test_the_group_is_its_guard_and_the_engine_and_their_rss_is_read(sleeper: int) -> None:
    members = group_pids(sleeper)
    assert len(members) == 2  # the guard leads the group; the engine is its child
    assert sleeper in members
    assert all(1 < rss_mb(pid) < 500 for pid in members)


async def test_without_nvidia_smi_gpu_memory_is_not_measured(
    sleeper: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi anywhere
    sampler = MemorySampler(sleeper)
    await sampler.sample()
    assert sampler.peak_rss_mb is not None
    assert sampler.peak_rss_mb > 1
    assert (sampler.peak_gpu_mb, sampler.gpu_note) == (None, "not measured: nvidia-smi not found")


async def test_gpu_memory_of_the_group_comes_from_nvidia_smi(
    sleeper: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_smi(tmp_path, monkeypatch, f'echo "{sleeper}, 2048"; echo "1, 999"')
    sampler = MemorySampler(sleeper)
    await sampler.sample()
    assert (sampler.peak_gpu_mb, sampler.gpu_note) == (2048.0, "")


@pytest.mark.parametrize(
    ("body", "note"),
    [('echo "1, 999"', NOT_LISTED), ("exit 9", "not measured: nvidia-smi failed")],
    ids=["other-processes-only", "fails"],
)
async def test_gpu_memory_nvidia_smi_cannot_attribute_is_not_zero(
    sleeper: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str, note: str
) -> None:
    _fake_smi(tmp_path, monkeypatch, body)
    sampler = MemorySampler(sleeper)
    await sampler.sample()
    assert (sampler.peak_gpu_mb, sampler.gpu_note) == (None, note)


async def test_gpu_name_driver_and_cuda_come_from_nvidia_smi(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_smi(tmp_path, monkeypatch, (
        'case "$1" in --query-gpu*) echo "NVIDIA H200, 143771 MiB, 570.86.15"; '
        'echo "NVIDIA H200, 143771 MiB, 570.86.15";; '
        '*) echo "| NVIDIA-SMI 570.86.15  Driver Version: 570.86.15  CUDA Version: 12.8 |";; esac'
    ))  # fmt: skip
    assert await gpus() == {
        "gpu": "NVIDIA H200, 143771 MiB",
        "gpu.count": "2",
        "gpu.driver": "570.86.15",
        "gpu.cuda": "12.8",
    }
