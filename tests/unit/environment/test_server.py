"""What servers say about themselves, read from their documented answers."""

from __future__ import annotations

from servegate.environment.server import metrics_fields, model_fields, props_fields


def test_vllm_models_give_the_max_context() -> None:
    listing = {"data": [{"id": "other", "max_model_len": 1}, {"id": "m", "max_model_len": 32768,
                                                               "owned_by": "vllm"}]}  # fmt: skip
    assert model_fields(listing, "m") == {
        "server.max_context": "32768",
        "server.max_context.source": "/v1/models max_model_len",
        "server.owned_by": "vllm",
    }


def test_llama_server_models_give_the_trained_context_only() -> None:
    listing = {"data": [{"id": "m", "meta": {"n_ctx_train": 8192}}]}
    assert model_fields(listing, "m") == {"server.n_ctx_train": "8192"}


def test_llama_server_props_give_build_context_and_template_digest() -> None:
    props = {"build_info": "b5000-abc", "total_slots": 4, "model_path": "/m.gguf",
             "default_generation_settings": {"n_ctx": 4096}, "chat_template": "{{x}}"}  # fmt: skip
    fields = props_fields(props)
    assert fields["server.build"] == "b5000-abc"
    assert fields["server.max_context"] == "4096"
    assert fields["server.total_slots"] == "4"
    assert len(fields["server.chat_template_sha256"]) == 12


def test_metrics_info_series_become_fields() -> None:
    text = (
        "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\n"
        'vllm:cache_config_info{block_size="16",cache_dtype="auto"} 1.0\n'
        'vllm:num_requests_running{model_name="m"} 0.0\n'
        'python_info{implementation="CPython",version="3.12.3"} 1.0\n'
    )
    assert metrics_fields(text) == {
        "metrics.vllm:cache_config_info.block_size": "16",
        "metrics.vllm:cache_config_info.cache_dtype": "auto",
        "metrics.python_info.implementation": "CPython",
        "metrics.python_info.version": "3.12.3",
    }


def test_answers_of_the_wrong_shape_give_nothing() -> None:
    assert model_fields(None, "m") == {}
    assert model_fields({"data": "x"}, "m") == {}
    assert props_fields(["x"]) == {}
