"""What a vLLM start-up log says about the engine it started: the engine config line, the KV cache
it sized, and whether the model was compiled now (cold) or loaded from vLLM's compile cache.

vLLM prints its whole engine config once ("Initializing a V1 LLM engine (v0.32.0) with config:
model=..., dtype=torch.bfloat16, ..."); dtype, enforce-eager, the compilation mode, chunked
prefill and the KV-cache dtype are nowhere else (not in /metrics, not in /v1/models). Read from
real vLLM 0.31.0 / 0.32.0 CPU logs (tests/data/vllm/logs/). A log that is not vLLM's gives {}.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

_ENGINE_LINE = re.compile(
    r"Initializing a V1 LLM engine \(v(?P<version>[^)]+)\) with config: (?P<cfg>.*)"
)
# key=value pairs of the config line, values as vLLM prints them (up to the next ", key=").
_FIELDS = {
    "dtype": re.compile(r"(?:^|, )dtype=([^,]+)"),
    "enforce_eager": re.compile(r"\benforce_eager=(\w+)"),
    "kv_cache_dtype": re.compile(r"\bkv_cache_dtype=([^,]+)"),
    "enable_prefix_caching": re.compile(r"\benable_prefix_caching=(\w+)"),
    "enable_chunked_prefill": re.compile(r"\benable_chunked_prefill=(\w+)"),
    "quantization": re.compile(r"(?:^|, )quantization=([^,]+)"),
    "max_seq_len": re.compile(r"\bmax_seq_len=(\d+)"),
    "speculative_config": re.compile(r"\bspeculative_config=(None|\w+\([^)]*\))"),
    "seed": re.compile(r"(?:^|, )seed=([^,]+)"),
    "compilation_mode": re.compile(r"'mode': <CompilationMode\.(\w+)"),
    "compile_backend": re.compile(r"'backend': '([^']*)'"),
    "cudagraph_mode": re.compile(r"'cudagraph_mode': <CUDAGraphMode\.(\w+)"),
}
_KV_TOKENS = re.compile(r"KV cache size: ([\d,]+) tokens")
_INIT_S = re.compile(r"init engine \(profile, create kv cache, warmup model\) took ([\d.]+) s")
_COMPILE_SAVED = re.compile(r"saved AOT compiled function|Compiling a graph for")
_COMPILE_LOADED = re.compile(r"(?:load|loading|loaded) (?:the )?AOT[- ]compiled function", re.I)
# 0.31.0, second start (measured): "Compiling model again due to a load failure from
# .../torch_aot_compile/..., reason: 'function' object has no attribute 'finalize_loading'".
_COMPILE_LOAD_FAILED = re.compile(r"Compiling model again due to a load failure")
_VERSION_BANNER = re.compile(r"\bversion (\d+\.\d+\.\d+\S*)\s*$")


def engine_facts(lines: Iterable[str]) -> dict[str, str]:
    """`vllm.*` facts of one start-up log (empty when it is not a vLLM log)."""
    out: dict[str, str] = {}
    compiled = loaded = load_failed = False
    for line in lines:
        match = _ENGINE_LINE.search(line)
        if match is not None and "vllm.version" not in out:
            out["vllm.version"] = match.group("version")
            cfg = match.group("cfg")
            for key, pattern in _FIELDS.items():
                found = pattern.search(cfg)
                if found is not None:
                    out[f"vllm.{key}"] = found.group(1).strip().strip("'")
            continue
        if "vllm.version" not in out and (banner := _VERSION_BANNER.search(line)):
            out["vllm.banner_version"] = banner.group(1)
        if kv := _KV_TOKENS.search(line):
            out["vllm.kv_cache_tokens"] = kv.group(1).replace(",", "")
        if init := _INIT_S.search(line):
            out["vllm.init_engine_s"] = init.group(1)
        compiled = compiled or bool(_COMPILE_SAVED.search(line))
        loaded = loaded or bool(_COMPILE_LOADED.search(line))
        load_failed = load_failed or bool(_COMPILE_LOAD_FAILED.search(line))
    if "vllm.version" not in out:
        # A start-up that died before the engine: the banner still names the version.
        version = out.get("vllm.banner_version")
        return {"vllm.version": version} if version else {}
    out.pop("vllm.banner_version", None)
    out["vllm.compile_cache"] = _compile_cache(
        out, compiled=compiled or load_failed, loaded=loaded and not load_failed
    )
    if load_failed:
        out["vllm.compile_cache"] = "cold (the compile cache failed to load; compiled again)"
    return out


def _compile_cache(facts: dict[str, str], *, compiled: bool, loaded: bool) -> str:
    # cold: compiled during this start (minutes on a CPU); warm: loaded from vLLM's cache.
    if facts.get("vllm.enforce_eager") == "True" or facts.get("vllm.compilation_mode") == "NONE":
        return "not compiled (eager)"
    if loaded:
        return "warm (loaded from the compile cache)"
    if compiled:
        return "cold (compiled at start-up)"
    return "unknown"


def startup_note(facts: dict[str, str]) -> str:
    """ " (vLLM 0.32.0: cold (compiled at start-up), engine init 105.29 s)", or "" for no facts."""
    if not facts:
        return ""
    parts = [f"vLLM {facts['vllm.version']}", facts.get("vllm.compile_cache", "unknown")]
    if "vllm.init_engine_s" in facts:
        parts.append(f"engine init {facts['vllm.init_engine_s']} s")
    return f" ({', '.join(parts)})"


def engine_facts_file(path: Path, max_bytes: int = 4_000_000) -> dict[str, str]:
    """`engine_facts` of a log file's first `max_bytes` (a missing file gives {})."""
    try:
        with path.open("rb") as fh:
            data = fh.read(max_bytes)
    except OSError:
        return {}
    return engine_facts(data.decode("utf-8", "replace").splitlines())
