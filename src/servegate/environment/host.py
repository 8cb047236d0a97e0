"""A managed engine's environment: package versions in its Python, GPU and driver, CPU model."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path

# Distributions whose versions decide what an engine computes; missing ones are left out.
PACKAGES = (
    "vllm", "sglang", "llama-cpp-python", "torch", "transformers", "flashinfer-python",
    "flashinfer", "xformers", "triton", "tokenizers", "accelerate", "safetensors", "gguf",
    "text-generation-server", "numpy",
)  # fmt: skip
_SCRIPT = (
    "import importlib.metadata as m, json, sys\n"
    "out = {'python': sys.version.split()[0]}\n"
    "for name in sys.argv[1:]:\n"
    "    try: out[name] = m.version(name)\n"
    "    except m.PackageNotFoundError: pass\n"
    "print(json.dumps(out))\n"
)
_PYTHON = re.compile(r"^python[0-9.]*$")
TIMEOUT_S = 30.0


def interpreter(argv: Sequence[str], env: Mapping[str, str]) -> str | None:
    """The Python that runs `argv`: argv[0] itself when it is a python, else the interpreter in
    the shebang of the script argv[0] names (e.g. `vllm serve`), else None."""
    first = argv[0]
    found = shutil.which(first, path=env.get("PATH")) if "/" not in first else first
    if _PYTHON.match(Path(first).name):
        return found or first
    if found is None:
        return None
    try:
        with open(found, "rb") as fh:
            head = fh.readline(400).decode(errors="replace").strip()
    except OSError:
        return None
    if not head.startswith("#!"):
        return None
    parts = head[2:].split()
    if not parts:
        return None
    if Path(parts[0]).name == "env" and len(parts) > 1:
        parts = parts[1:]
    return parts[0] if _PYTHON.match(Path(parts[0]).name) else None


async def _output(argv: Sequence[str], env: Mapping[str, str] | None, cwd: Path | None) -> str:
    try:
        child = await asyncio.create_subprocess_exec(
            *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
            stdin=asyncio.subprocess.DEVNULL, env=dict(env) if env is not None else None, cwd=cwd,
        )  # fmt: skip
    except OSError:
        return ""
    try:
        out, _ = await asyncio.wait_for(child.communicate(), timeout=TIMEOUT_S)
    except TimeoutError:
        child.kill()
        await child.wait()
        return ""
    return out.decode(errors="replace") if child.returncode == 0 else ""


async def python_packages(
    argv: Sequence[str], env: Mapping[str, str], cwd: Path | None
) -> dict[str, str]:
    """`python.<package>` versions as the engine's own interpreter sees them (empty: not a
    Python engine, or its interpreter could not be asked)."""
    python = interpreter(argv, env)
    if python is None:
        return {}
    text = await _output([python, "-c", _SCRIPT, *PACKAGES], env, cwd)
    try:
        found = json.loads(text.strip().splitlines()[-1]) if text.strip() else {}
    except ValueError:
        return {}
    if not isinstance(found, dict):
        return {}
    return {f"python.{k}": str(v) for k, v in found.items()}


async def gpus() -> dict[str, str]:
    """GPU names, memory, driver and CUDA version from nvidia-smi, or why they are unknown."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return {"gpu": "none found (nvidia-smi not on PATH)"}
    query = [smi, "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"]
    rows = [r.strip() for r in (await _output(query, None, None)).splitlines() if r.strip()]
    if not rows:
        return {"gpu": "unknown (nvidia-smi failed)"}
    out = {"gpu": "; ".join(sorted(set(", ".join(r.split(", ")[:2]) for r in rows)))}
    out["gpu.count"] = str(len(rows))
    out["gpu.driver"] = rows[0].split(", ")[-1]
    cuda = re.search(r"CUDA Version:\s*([\d.]+)", await _output([smi], None, None))
    if cuda:
        out["gpu.cuda"] = cuda.group(1)
    return out


def cpu(cpuinfo: Path = Path("/proc/cpuinfo")) -> dict[str, str]:
    """CPU model and logical CPU count."""
    out = {"cpu.count": str(os.cpu_count() or 0)}
    try:
        for line in cpuinfo.read_text(errors="replace").splitlines():
            if line.startswith("model name"):
                out["cpu"] = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return out


async def host_environment(
    argv: Sequence[str], env: Mapping[str, str], cwd: Path | None
) -> dict[str, str]:
    """Everything above, as flat `key: value` fingerprint fields."""
    packages, gpu = await asyncio.gather(python_packages(argv, env, cwd), gpus())
    return {**cpu(), **gpu, **packages}
