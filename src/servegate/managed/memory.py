"""Sampled peak memory of a process group: RSS from /proc, GPU memory through `nvidia-smi`."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
from pathlib import Path

from servegate.engine.guard import group_members

GPU_EVERY_S = 2.0


def group_pids(pgid: int, proc: Path = Path("/proc")) -> list[int]:
    """Every live process whose process group is `pgid` (zombies, which hold no memory, left
    out): the guard's own rule (`servegate.engine.guard`)."""
    return group_members(pgid, proc)


def rss_mb(pid: int, proc: Path = Path("/proc")) -> float:
    """Resident set size of one process in MiB (0 when it is gone)."""
    try:
        for line in (proc / str(pid) / "status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0.0


NOT_LISTED = (
    "not measured: nvidia-smi lists none of the engine's processes (a CPU-only engine, or "
    "servegate sees another PID namespace)"
)


async def gpu_memory_mb(pids: set[int], nvidia_smi: str) -> tuple[float | None, str]:
    """GPU memory used by `pids` (MiB) according to nvidia-smi, or None and why not."""
    try:
        child = await asyncio.create_subprocess_exec(
            nvidia_smi, "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
        )  # fmt: skip
        out, _ = await asyncio.wait_for(child.communicate(), timeout=10)
    except (OSError, TimeoutError):
        return None, "not measured: nvidia-smi failed"
    if child.returncode != 0:
        return None, "not measured: nvidia-smi failed"
    used, listed = 0.0, False
    for line in out.decode(errors="replace").splitlines():
        parts = [p.strip() for p in line.split(",")]
        with contextlib.suppress(ValueError, IndexError):
            if int(parts[0]) in pids:
                used += float(parts[1])
                listed = True
    return (used, "") if listed else (None, NOT_LISTED)


class MemorySampler:
    """Peak RSS (summed over the group) and GPU memory of one process group, sampled."""

    def __init__(self, pgid: int, skip: frozenset[int] = frozenset()) -> None:
        self.pgid = pgid
        self.skip = skip  # processes of the group that are not the engine's (its guard)
        self.peak_rss_mb: float | None = None
        self.peak_gpu_mb: float | None = None
        self.nvidia_smi = shutil.which("nvidia-smi")
        self.gpu_note = "" if self.nvidia_smi else "not measured: nvidia-smi not found"
        self._last_gpu = -GPU_EVERY_S
        self._task: asyncio.Task[None] | None = None

    async def sample(self) -> None:
        """One sample now (GPU at most every GPU_EVERY_S)."""
        pids = [pid for pid in group_pids(self.pgid) if pid not in self.skip]
        if not pids:
            return
        total = sum(rss_mb(pid) for pid in pids)
        self.peak_rss_mb = max(self.peak_rss_mb or 0.0, total)
        loop = asyncio.get_running_loop()
        if self.nvidia_smi and loop.time() - self._last_gpu >= GPU_EVERY_S:
            self._last_gpu = loop.time()
            used, note = await gpu_memory_mb(set(pids), self.nvidia_smi)
            if used is not None:
                self.peak_gpu_mb = max(self.peak_gpu_mb or 0.0, used)
            if self.peak_gpu_mb is None:  # once measured, a later empty listing changes nothing
                self.gpu_note = note

    def start(self, every_s: float = 0.5) -> None:
        """Keep sampling in the background until `stop`."""

        async def loop() -> None:
            while True:
                await self.sample()
                await asyncio.sleep(every_s)

        self._task = asyncio.get_running_loop().create_task(loop())

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
