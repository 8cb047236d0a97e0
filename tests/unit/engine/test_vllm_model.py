"""vLLM's model folder and command: the pure parts (no vLLM, no torch).

Real vLLM runs in tests/integration/test_vllm_engine.py (marker `vllm`:
bash scripts/setup.sh vllm && bash scripts/test.sh -m vllm).
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from servegate.engine.transformers_model import DONE_MARKER, converted_dir
from servegate.engine.vllm_model import (
    existing_conversion,
    main,
    server_argv,
    server_env,
    vllm_view,
)

# What transformers 5.19 writes into the converted folder's config.json (measured 2026-12-02).
GGUF_QUANT = {"dequantize": False, "gguf_file": "m.Q4_1.gguf", "quant_method": "gguf"}


def _converted(root: Path, gguf: Path, version: str, *, done: bool = True) -> Path:
    folder = converted_dir(gguf, root, version)
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(
        json.dumps({"architectures": ["LlamaForCausalLM"], "quantization_config": GGUF_QUANT})
    )
    (folder / "model.safetensors").write_bytes(b"weights")
    (folder / "tokenizer.json").write_text("{}")
    if done:
        (folder / DONE_MARKER).write_text("done\n")
    return folder


@pytest.fixture
def gguf(tmp_path: Path) -> Path:
    path = tmp_path / "m.Q4_1.gguf"
    path.write_bytes(b"GGUF weights")
    return path


def test_a_finished_conversion_by_any_transformers_version_is_reused(
    tmp_path: Path, gguf: Path
) -> None:
    root = tmp_path / "cache"
    root.mkdir()
    assert existing_conversion(gguf, root) is None
    _converted(root, gguf, "5.19.0", done=False)  # interrupted: not a conversion
    assert existing_conversion(gguf, root) is None
    done = _converted(root, gguf, "5.24.0")
    assert existing_conversion(gguf, root) == done
    other = tmp_path / "other.gguf"
    other.write_bytes(b"GGUF other weights")
    assert existing_conversion(other, root) is None


def test_the_vllm_view_drops_the_gguf_quantization_config_and_links_the_weights(
    tmp_path: Path, gguf: Path
) -> None:
    folder = _converted(tmp_path, gguf, "5.19.0")
    view = vllm_view(folder)
    assert view == folder.with_name(f"{folder.name}-vllm")
    config = json.loads((view / "config.json").read_text())
    assert "quantization_config" not in config  # vLLM: "Unknown quantization method: gguf"
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert (view / "model.safetensors").resolve() == (folder / "model.safetensors").resolve()
    assert (view / "model.safetensors").read_bytes() == b"weights"
    # The source keeps its config (the transformers route reads it) and the view is not taken
    # for a conversion itself.
    assert "quantization_config" in json.loads((folder / "config.json").read_text())
    assert existing_conversion(gguf, tmp_path) == folder
    assert vllm_view(folder) == view  # made once


def test_the_server_is_vllms_module_entry_point_on_loopback(tmp_path: Path) -> None:
    argv = server_argv(tmp_path, "{port}", python="/v/bin/python", extra=("--enforce-eager",))
    assert argv[:3] == ["/v/bin/python", "-m", "vllm.entrypoints.openai.api_server"]
    joined = shlex.join(argv)
    assert f"--model {tmp_path}" in joined
    assert "--served-model-name smollm2-135m-instruct" in joined
    assert "--host 127.0.0.1 --port '{port}'" in joined
    assert argv[-1] == "--enforce-eager"


def test_the_kv_cache_is_sized_unless_the_caller_sized_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)
    assert server_env()["VLLM_CPU_KVCACHE_SPACE"] == "2"
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")
    assert server_env()["VLLM_CPU_KVCACHE_SPACE"] == "1"


def test_command_prints_the_server_line_for_a_given_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["command", "--model", str(tmp_path), "--port", "8123"]) == 0
    line = capsys.readouterr().out.strip()
    assert line.endswith("--port 8123 --max-model-len 4096")
    assert "-m vllm.entrypoints.openai.api_server" in line


def test_tools_use_the_hermes_parser_with_a_template_that_renders_them() -> None:
    import jinja2

    from servegate.engine.vllm_model import TOOLS_TEMPLATE, tools_flags

    flags = tools_flags()
    assert flags[:3] == ("--enable-auto-tool-choice", "--tool-call-parser", "hermes")
    assert Path(flags[-1]) == TOOLS_TEMPLATE
    env = jinja2.Environment()
    env.filters["tojson"] = json.dumps
    template = env.from_string(TOOLS_TEMPLATE.read_text())
    chat = [{"role": "user", "content": "Hi"}]
    # Without tools: byte for byte what SmolLM2's shipped ChatML template renders.
    assert template.render(messages=chat, add_generation_prompt=True) == (
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
        "Face<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    )
    tool = {"type": "function", "function": {"name": "get_weather", "parameters": {}}}
    shown = template.render(messages=chat, tools=[tool], add_generation_prompt=True)
    assert '"name": "get_weather"' in shown
    assert "<tool_call></tool_call> XML tags" in shown


@pytest.mark.parametrize(
    ("variant", "says"),
    [("flash-attn", "is a llama.cpp server flag, not weights"), ("no-such", "unknown variant")],
)
def test_a_variant_without_weights_of_its_own_is_refused_with_the_weight_variants_named(
    variant: str, says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["convert", "--variant", variant]) != 0
    err = capsys.readouterr().err
    assert says in err
    assert "mixed-dtype" in err
    assert "logit-scale" in err
    assert "\n" not in err.strip()
