"""vLLM's own words about its KV cache, from the `vllm:cache_config_info` series of /metrics:
block size, blocks, capacity in tokens, prefix caching and the KV-cache dtype, under names the
gates read (`server.kv_*`). Other servers have no such series and get nothing here."""

from __future__ import annotations

from collections.abc import Mapping

CACHE_INFO = "metrics.vllm:cache_config_info"


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def kv_cache_fields(metrics: Mapping[str, str]) -> dict[str, str]:
    """`server.kv_block_size`, `server.kv_blocks`, `server.kv_capacity_tokens` (blocks × block
    size: the most tokens all running requests can hold), `server.prefix_caching`,
    `server.kv_cache_dtype`, from the `vllm:cache_config_info` labels in `metrics`."""
    block = _int(metrics.get(f"{CACHE_INFO}.block_size"))
    blocks = _int(metrics.get(f"{CACHE_INFO}.num_gpu_blocks"))
    out: dict[str, str] = {}
    if block is not None:
        out["server.kv_block_size"] = str(block)
    if blocks is not None:
        out["server.kv_blocks"] = str(blocks)
    if block is not None and blocks is not None:
        out["server.kv_capacity_tokens"] = str(block * blocks)
        out["server.kv_capacity_tokens.source"] = (
            "vllm:cache_config_info num_gpu_blocks × block_size"
        )
    for label, key in (
        ("enable_prefix_caching", "prefix_caching"),
        ("cache_dtype", "kv_cache_dtype"),
    ):
        value = metrics.get(f"{CACHE_INFO}.{label}")
        if value is not None:
            out[f"server.{key}"] = value
    return out
