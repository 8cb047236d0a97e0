from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from servegate.engine.gguf_layout import read_layout
from servegate.engine.variants import (
    BENIGN_VARIANT,
    DRIFT_SCALE,
    LOGIT_SCALE_FACTOR,
    VARIANTS,
    WeightRecipe,
    f32_read_as_bf16,
    variant_gguf,
)

from .conftest import MakeGGUF, f32_tensor


def _tensor(path: Path, name: str) -> np.ndarray:
    info = read_layout(path).tensor(name)
    raw = path.read_bytes()[info.offset : info.offset + info.nbytes]
    return np.frombuffer(raw, dtype="<u1" if info.type_name != "F32" else "<f4")


def test_f32_read_as_bf16_takes_value_i_from_bytes_2i_to_2i_plus_2() -> None:
    # 1.0f is 00 00 80 3f: its low half reads as bf16 0.0, its high half as bf16 1.0.
    values = np.array([1.0, 2.0, -3.5, 0.25], dtype="<f4")
    assert f32_read_as_bf16(values).tolist() == [0.0, 1.0, 0.0, 2.0]


def test_odd_positions_hold_the_bf16_truncation_of_the_first_half() -> None:
    values = np.random.default_rng(0).normal(size=64).astype("<f4")
    bits = values.view("<u4") & np.uint32(0xFFFF0000)
    assert np.array_equal(f32_read_as_bf16(values)[1::2], bits.view("<f4")[:32])


def test_mixed_dtype_rewrites_only_f32_attn_norms_and_keeps_sizes(
    tiny_model: Path, tmp_path: Path
) -> None:
    before = tiny_model.read_bytes()
    out = variant_gguf(VARIANTS["mixed-dtype"], tiny_model, tmp_path / "cache")
    assert tiny_model.read_bytes() == before  # the source is never modified
    assert out.stat().st_size == tiny_model.stat().st_size
    assert _tensor(out, "blk.0.attn_norm.weight").tolist() == [0.0, 1.0, 0.0, 2.0]
    for untouched in ("token_embd.weight", "blk.0.attn_q.weight", "blk.0.ffn_norm.weight"):
        assert np.array_equal(_tensor(out, untouched), _tensor(tiny_model, untouched))


def test_drift_moves_only_its_norms_by_at_most_the_drift_scale(
    tiny_model: Path, tmp_path: Path
) -> None:
    out = variant_gguf(VARIANTS["drift"], tiny_model, tmp_path)
    drifted = _tensor(out, "blk.3.ffn_norm.weight")
    assert np.allclose(np.abs(drifted - 1.0), DRIFT_SCALE, rtol=1e-5)
    assert (drifted > 1.0).any()
    assert (drifted < 1.0).any()
    assert np.array_equal(_tensor(out, "blk.0.ffn_norm.weight"), [1.0] * 4)


def test_drift_is_the_same_on_every_machine(make_gguf: MakeGGUF, tmp_path: Path) -> None:
    source = make_gguf([f32_tensor("blk.3.ffn_norm.weight", [1.0] * 16)])
    first = variant_gguf(VARIANTS["drift"], source, tmp_path / "a").read_bytes()
    assert variant_gguf(VARIANTS["drift"], source, tmp_path / "b").read_bytes() == first


def test_a_variant_is_written_once_and_then_read_from_the_cache(
    tiny_model: Path, tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    first = variant_gguf(VARIANTS["mixed-dtype"], tiny_model, cache)
    written_ns = first.stat().st_mtime_ns
    again = variant_gguf(VARIANTS["mixed-dtype"], tiny_model, cache)
    assert again == first
    assert again.stat().st_mtime_ns == written_ns
    assert [p.name for p in cache.iterdir()] == [first.name]  # no temp files left


def test_a_changed_source_file_gets_a_new_cache_entry(make_gguf: MakeGGUF, tmp_path: Path) -> None:
    a = make_gguf([f32_tensor("blk.0.attn_norm.weight", [1.0, 2.0])], name="a.gguf")
    b = make_gguf([f32_tensor("blk.0.attn_norm.weight", [1.0, 3.0])], name="a2.gguf")
    recipe = VARIANTS["mixed-dtype"]
    assert variant_gguf(recipe, a, tmp_path).name != variant_gguf(recipe, b, tmp_path).name


def test_config_only_variants_serve_the_shipped_file_itself(tiny_model: Path) -> None:
    assert variant_gguf(VARIANTS["clean"], tiny_model) == tiny_model
    assert variant_gguf(VARIANTS[BENIGN_VARIANT], tiny_model) == tiny_model
    assert VARIANTS[BENIGN_VARIANT].server_args


def test_a_recipe_that_matches_no_tensor_is_an_error_and_leaves_nothing(
    make_gguf: MakeGGUF, tmp_path: Path
) -> None:
    source = make_gguf([f32_tensor("output_norm.weight", [1.0])])
    with pytest.raises(ValueError, match="matched no tensor"):
        variant_gguf(VARIANTS["mixed-dtype"], source, tmp_path / "cache")
    assert list((tmp_path / "cache").iterdir()) == []


def test_a_recipe_may_not_change_a_tensor_size(tiny_model: Path, tmp_path: Path) -> None:
    shrink = WeightRecipe("shrink", "v1", lambda info: info.type_name == "F32", lambda v, i: v[:1])
    variant = VARIANTS["clean"].__class__("shrink", "test", recipe=shrink)
    with pytest.raises(ValueError, match="changed the size"):
        variant_gguf(variant, tiny_model, tmp_path)


def test_logit_scale_multiplies_only_the_output_norm_by_the_factor(
    tiny_model: Path, tmp_path: Path
) -> None:
    out = variant_gguf(VARIANTS["logit-scale"], tiny_model, tmp_path)
    assert _tensor(out, "output_norm.weight").tolist() == pytest.approx(
        [LOGIT_SCALE_FACTOR, 2 * LOGIT_SCALE_FACTOR]
    )
    for untouched in ("blk.0.attn_norm.weight", "blk.0.ffn_norm.weight", "token_embd.weight"):
        assert np.array_equal(_tensor(out, untouched), _tensor(tiny_model, untouched))


def test_the_logit_scale_factor_is_part_of_the_cache_key() -> None:
    recipe = VARIANTS["logit-scale"].recipe
    assert recipe is not None
    assert str(LOGIT_SCALE_FACTOR) in recipe.revision


def test_flash_attn_serves_the_shipped_file_with_the_flash_attention_flag(
    tiny_model: Path,
) -> None:
    variant = VARIANTS["flash-attn"]
    assert variant_gguf(variant, tiny_model) == tiny_model
    assert variant.server_args == ("--flash_attn", "true")
