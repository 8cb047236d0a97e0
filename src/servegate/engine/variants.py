"""The reference model's variants: weight recipes written to a cache, and config-only changes.

A variant selects the GGUF file and extra server flags; a fault (faults.py) selects the proxy
behaviour in front of it, so the two combine freely. Weight variants are written once into
`~/.cache/servegate/engine/` under a key hashed from the source file's bytes and the recipe
revision; the installed model file is never modified.

Measured on SmolLM2-135M-Instruct Q4_1 (2-core CPU, temperature 0, 32 max tokens), six canaries
("Reply with exactly: OK", "What is 2+3? Answer with a number.", "Name the capital of France in
one word.", "Translate 'good morning' to French.", "Write a Python function that adds two
numbers.", "列出三种水果。"):
- `mixed-dtype`: every answer is a run of commas (`,,,,,,,,`); clean answers fluent text.
- `drift` (ffn_norm of blocks 3 and 7 scaled by 1±2 %): 3 of 6 answers change after their
  first few tokens (good morning, Python, 水果); 2+3 and Paris stay; the text stays fluent.
- `mmap-off`: 6 of 6 answers identical to clean; ~50 tok/s for both over 5 runs each (a thread
  count change is not used: it moves speed on 2 cores).
Teacher-forced in-process (llama_cpp.Llama, logits_all) over probes/reference/*.txt joined into one
2,951-token sequence, variant against clean; [in brackets: each text on its own, 2,944 tokens,
as the numerics gate scores them]; ± is the paired per-token standard error:
- `flash-attn` (`--flash_attn true`): a benign kernel-path change that is not bit-identical.
  4.9 % argmax flips, mean |Δlogprob| of clean's greedy token 0.058 nats, ΔNLL +0.0025 ± 0.0025
  nats/token, z ≈ +1.0 [4.7 %, 0.049, +0.0046 ± 0.0019, z ≈ +2.4; 6 of 8 texts above zero].
  Served: decode ~63 tok/s like clean; prefill like clean up to ~650 tokens (278: 1.9 s vs 2.0 s),
  but about half of clean's rate for a 2,515-token prompt (70-78 vs 141-152 tok/s).
- `logit-scale` (output_norm.weight x 0.8, so every logit x 0.8): a fluent systematic regression.
  Scaling keeps the logits' order, and the server's default repeat penalty (positive logits / 1.1,
  negative x 1.1) commutes with it, so greedy text is unchanged: 0.03 % argmax flips (1 token),
  mean |Δlogprob| 0.43 nats, ΔNLL +0.072 ± 0.008 nats/token, z ≈ +9 [+0.065 ± 0.008, z ≈ +8;
  8 of 8 texts above zero].
Greedy comparisons need a reset request first (see launch.py): llama-cpp-python reuses the KV
prefix of the previous request, and the same chat sent twice in a row can answer differently.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import numpy.typing as npt

from servegate.engine.gguf_layout import TensorInfo, read_layout

F32 = 0
Floats = npt.NDArray[np.float32]


@dataclass(frozen=True)
class WeightRecipe:
    """A deterministic rewrite of some F32 tensors; `revision` is part of the cache key."""

    name: str
    revision: str
    selects: Callable[[TensorInfo], bool]
    transform: Callable[[Floats, TensorInfo], Floats]


@dataclass(frozen=True)
class Variant:
    """What `--variant NAME` serves: a weight recipe (or the shipped file) plus server flags."""

    name: str
    description: str
    recipe: WeightRecipe | None = None
    server_args: tuple[str, ...] = field(default=())


def f32_read_as_bf16(values: Floats, info: TensorInfo | None = None) -> Floats:
    """Value i becomes the bf16 formed by bytes [2i, 2i+2) of the f32 buffer, widened to f32."""
    # What a fused kernel that assumed bf16 norm weights reads from an f32 buffer.
    halves = np.ascontiguousarray(values, dtype="<f4").view("<u2")[: values.size]
    widened: Floats = (halves.astype("<u4") << np.uint32(16)).view("<f4")
    return widened


DRIFT_LAYERS = (3, 7)
DRIFT_SCALE = 0.02


def drift_perturbation(values: Floats, info: TensorInfo) -> Floats:
    """Scale each weight by 1 ± DRIFT_SCALE with a sign pattern seeded by the tensor's name."""
    seed = int.from_bytes(hashlib.sha256(info.name.encode()).digest()[:8], "little")
    signs = np.random.default_rng(seed).choice(np.array([-1.0, 1.0]), size=values.size)
    drifted: Floats = (values * (1.0 + DRIFT_SCALE * signs)).astype("<f4")
    return drifted


def _is_f32_attn_norm(info: TensorInfo) -> bool:
    return info.ggml_type == F32 and "attn_norm" in info.name


def _is_drift_target(info: TensorInfo) -> bool:
    names = {f"blk.{layer}.ffn_norm.weight" for layer in DRIFT_LAYERS}
    return info.ggml_type == F32 and info.name in names


MIXED_DTYPE = WeightRecipe(
    "mixed-dtype", "attn_norm-f32-as-bf16/v1", _is_f32_attn_norm, f32_read_as_bf16
)
DRIFT = WeightRecipe(
    "drift", f"ffn_norm{DRIFT_LAYERS}x{DRIFT_SCALE}/v1", _is_drift_target, drift_perturbation
)

LOGIT_SCALE_FACTOR = 0.8


def scale_logits(values: Floats, info: TensorInfo | None = None) -> Floats:
    """Multiply the final norm's gain, and with it every logit, by LOGIT_SCALE_FACTOR."""
    scaled: Floats = (values * np.float32(LOGIT_SCALE_FACTOR)).astype("<f4")
    return scaled


def _is_output_norm(info: TensorInfo) -> bool:
    # The LM head is linear without bias, so this gain scales the logits themselves.
    return info.ggml_type == F32 and info.name == "output_norm.weight"


LOGIT_SCALE = WeightRecipe(
    "logit-scale", f"output_norm-x{LOGIT_SCALE_FACTOR}/v1", _is_output_norm, scale_logits
)

VARIANTS: dict[str, Variant] = {
    "clean": Variant("clean", "the shipped SmolLM2-135M-Instruct Q4_1 file, default flags"),
    "mixed-dtype": Variant(
        "mixed-dtype",
        "F32 attn_norm weights read back as bf16 (vLLM #48324): answers runs of commas",
        recipe=MIXED_DTYPE,
    ),
    "drift": Variant(
        "drift",
        "a few ffn_norm weights scaled by 1±2 %: fluent, but some greedy answers change",
        recipe=DRIFT,
    ),
    "mmap-off": Variant(
        "mmap-off",
        "same weights, loaded without mmap: same greedy outputs, same speed (benign config change)",
        server_args=("--use_mmap", "false"),
    ),
    "flash-attn": Variant(
        "flash-attn",
        "same weights on llama.cpp's flash-attention kernel: not bit-identical, benign "
        "(4.9 % argmax flips, ΔNLL +0.003 nats/token)",
        server_args=("--flash_attn", "true"),
    ),
    "logit-scale": Variant(
        "logit-scale",
        f"output_norm weights x{LOGIT_SCALE_FACTOR}: flatter distributions, same greedy text, "
        "NLL +0.07 nats/token",
        recipe=LOGIT_SCALE,
    ),
}

# The config-only change that the demo uses as its benign candidate.
BENIGN_VARIANT = "mmap-off"


def default_cache_dir() -> Path:
    """`$XDG_CACHE_HOME/servegate/engine`, else `~/.cache/servegate/engine`."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "servegate" / "engine"


def file_digest(path: Path) -> str:
    """SHA-256 of the file's bytes (about 0.2 s for the 98 MB model)."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def apply_recipe(source: Path, dest: Path, recipe: WeightRecipe) -> int:
    """Copy `source` to `dest` and apply `recipe` there; return how many tensors changed."""
    layout = read_layout(source)
    shutil.copyfile(source, dest)
    changed = 0
    with dest.open("r+b") as handle:
        for info in layout.tensors:
            if not recipe.selects(info):
                continue
            handle.seek(info.offset)
            values = np.frombuffer(handle.read(info.nbytes), dtype="<f4").copy()
            patched = recipe.transform(values, info).astype("<f4")
            if patched.shape != values.shape:
                raise ValueError(f"recipe {recipe.name} changed the size of {info.name}")
            handle.seek(info.offset)
            handle.write(patched.tobytes())
            changed += 1
        handle.flush()
        os.fsync(handle.fileno())
    return changed


def variant_gguf(variant: Variant, source: Path, cache_dir: Path | None = None) -> Path:
    """The GGUF file that serves `variant`: `source` itself, or a cached rewritten copy."""
    if variant.recipe is None:
        return source
    recipe = variant.recipe
    directory = cache_dir or default_cache_dir()
    directory.mkdir(parents=True, exist_ok=True)
    key_text = f"{file_digest(source)}|{recipe.name}|{recipe.revision}"
    key = hashlib.sha256(key_text.encode()).hexdigest()[:16]
    dest = directory / f"{source.stem}.{recipe.name}.{key}.gguf"
    if dest.is_file():
        return dest
    # Temp file + rename: a killed writer never leaves a half-patched file under the final name.
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
    try:
        if apply_recipe(source, tmp, recipe) == 0:
            raise ValueError(f"recipe {recipe.name} matched no tensor in {source.name}")
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)
    return dest
