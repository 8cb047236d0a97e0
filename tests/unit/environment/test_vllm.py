"""vLLM 0.32.0's real /metrics info series (captured 2026-12-02, tests/data/vllm/metrics-info.txt)
and /v1/models answer, read into fingerprint fields."""

from __future__ import annotations

import json
from pathlib import Path

from servegate.environment.server import metrics_fields, model_fields
from servegate.environment.vllm import kv_cache_fields

DATA = Path(__file__).resolve().parents[2] / "data" / "vllm"


def test_every_cache_config_label_is_kept_and_the_kv_capacity_is_derived() -> None:
    series = metrics_fields((DATA / "metrics-info.txt").read_text())
    cache = {k for k in series if k.startswith("metrics.vllm:cache_config_info.")}
    assert len(cache) == 37  # a global cap of 40 fields (5 for python_info) cut it at 35
    assert series["metrics.vllm:cache_config_info.num_gpu_blocks"] == "728"
    assert series["metrics.vllm:cache_config_info.kv_cache_size_tokens"] == "93184"
    assert series["metrics.python_info.version"] == "3.11.7"
    assert kv_cache_fields(series) == {
        "server.kv_block_size": "128",
        "server.kv_blocks": "728",
        "server.kv_capacity_tokens": "93184",  # 728 × 128, what vLLM's own log says
        "server.kv_capacity_tokens.source": "vllm:cache_config_info num_gpu_blocks × block_size",
        "server.prefix_caching": "True",
        "server.kv_cache_dtype": "auto",
    }


def test_servers_without_the_series_or_with_unknown_blocks_get_no_capacity() -> None:
    assert kv_cache_fields({}) == {}
    unknown = {
        "metrics.vllm:cache_config_info.block_size": "16",
        "metrics.vllm:cache_config_info.num_gpu_blocks": "None",  # before profiling
    }
    assert kv_cache_fields(unknown) == {"server.kv_block_size": "16"}


def test_the_served_context_comes_from_max_model_len() -> None:
    listing = json.loads((DATA / "models.json").read_text())
    assert model_fields(listing, "smollm2-135m-instruct") == {
        "server.max_context": "4096",
        "server.max_context.source": "/v1/models max_model_len",
        "server.owned_by": "vllm",
    }
