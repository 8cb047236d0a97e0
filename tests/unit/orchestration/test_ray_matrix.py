"""What a matrix entry asks a Ray cluster for (`servegate matrix --ray`), and whether a cluster
can place it. The cluster itself is real in tests/integration/test_matrix_ray.py (-m ray)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from servegate.config.loader import ConfigError
from servegate.config.matrix import load_matrix
from servegate.orchestration.ray_matrix import placeable


def _entry(tmp_path: Path, **fields: object) -> dict[str, float]:
    path = tmp_path / "matrix.yaml"
    entry = {"name": "e", "url": "http://127.0.0.1:8/v1", **fields}
    path.write_text(yaml.safe_dump({"baseline": {"url": "http://127.0.0.1:9/v1"},
                                    "entries": [entry]}))  # fmt: skip
    [loaded] = load_matrix(path).entries
    return loaded.needs()


@pytest.mark.parametrize(
    ("fields", "needs"),
    [
        ({}, {"CPU": 1}),
        ({"tp": 2}, {"CPU": 1, "GPU": 2}),
        ({"tp": 2, "pp": 2}, {"CPU": 1, "GPU": 4}),
        ({"pp": 3}, {"CPU": 1, "GPU": 3}),
        ({"tp": 8, "resources": {"gpus": 1, "cpus": 4}}, {"CPU": 4, "GPU": 1}),
        ({"tp": 2, "resources": {"accelerator_type": "H200", "custom": {"nvlink": 1}}},
         {"CPU": 1, "GPU": 2, "accelerator_type:H200": 0.001, "nvlink": 1}),
        ({"resources": {"cpus": 0, "custom": {"fake_gpu": 1}}}, {"fake_gpu": 1}),
    ],
    ids=["nothing", "tp", "tp-x-pp", "pp", "explicit", "accelerator-custom", "custom-only"],
)  # fmt: skip
def test_an_entry_asks_for_tp_times_pp_gpus_unless_its_resources_block_says_otherwise(
    tmp_path: Path, fields: dict[str, object], needs: dict[str, float]
) -> None:
    assert _entry(tmp_path, **fields) == needs


@pytest.mark.parametrize(
    ("resources", "message"),
    [
        ({"gpu": 1}, "entries.0.resources.gpu: Extra inputs are not permitted"),
        ({"custom": {"GPU": 2}}, "custom.GPU: give it as cpus/gpus, not as a custom resource"),
        ({"custom": {"fake_gpu": 0}}, "custom.fake_gpu: a resource amount must be above 0"),
        ({"gpus": -1}, "entries.0.resources.gpus: Input should be greater than or equal to 0"),
    ],
    ids=["unknown-key", "gpu-as-custom", "zero-custom", "negative"],
)
def test_a_bad_resources_block_is_one_line_naming_it(
    tmp_path: Path, resources: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError) as refused:
        _entry(tmp_path, resources=resources)
    assert message in str(refused.value)
    assert "\n" not in str(refused.value)


def test_an_entry_is_placeable_when_one_node_alone_has_everything_it_asks_for() -> None:
    nodes = [{"CPU": 8.0, "GPU": 2.0}, {"CPU": 8.0, "GPU": 2.0, "accelerator_type:H200": 1.0}]
    assert placeable({"CPU": 1, "GPU": 2}, nodes)
    assert placeable({"GPU": 2, "accelerator_type:H200": 0.001}, nodes)
    # Four GPUs in all, but never four on one node: Ray cannot place it.
    assert not placeable({"GPU": 4}, nodes)
    assert not placeable({"GPU": 1, "accelerator_type:B200": 0.001}, nodes)
    assert not placeable({"CPU": 1}, [])  # no node alive
