"""embed-perturb: embedding vectors moved off their direction by a known angle, nothing else."""

from __future__ import annotations

import math

import numpy as np
import pytest

from servegate.engine.fault_proxy import Payload
from servegate.engine.fault_rewrites import perturb_embeddings, perturb_vector
from servegate.engine.faults import FaultOptions


def _cosine(u: list[float], v: list[float]) -> float:
    a, b = np.asarray(u), np.asarray(v)
    return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


def _answer(*vectors: object) -> Payload:
    data = [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)]
    return {"object": "list", "data": data, "usage": {"prompt_tokens": 3, "total_tokens": 3}}


@pytest.mark.parametrize("scale", [0.01, 0.1, 0.5], ids=["0.01", "0.1", "0.5"])
def test_the_cosine_to_the_original_is_one_over_root_one_plus_scale_squared(scale: float) -> None:
    vector = [float(x) for x in np.linspace(-1.0, 2.0, 64)]
    moved = perturb_vector(vector, scale, seed=3)
    assert _cosine(vector, moved) == pytest.approx(1 / math.sqrt(1 + scale * scale), abs=1e-12)
    assert moved != vector


def test_every_float_vector_of_an_answer_is_perturbed_and_the_rest_kept() -> None:
    original = _answer([1.0, 2.0, 3.0], [0.5, -0.5, 0.25], "AAAAgD8=")
    moved = perturb_embeddings(original, 0.1)
    assert moved is not None
    assert [_cosine(a["embedding"], b["embedding"]) for a, b in
            zip(original["data"][:2], moved["data"][:2], strict=True)] == pytest.approx(
        [1 / math.sqrt(1.01)] * 2, abs=1e-12)  # fmt: skip
    assert moved["data"][2]["embedding"] == "AAAAgD8="  # base64 left alone
    assert moved["usage"] == original["usage"]
    assert original["data"][0]["embedding"] == [1.0, 2.0, 3.0]  # input not mutated


def test_the_same_answer_is_perturbed_the_same_way_every_time() -> None:
    answer = _answer([0.1, 0.2, 0.3, 0.4])
    assert perturb_embeddings(answer, 0.1) == perturb_embeddings(answer, 0.1)


@pytest.mark.parametrize(
    "payload",
    [{"object": "list"}, _answer([0.0, 0.0]), _answer("AAAAgD8="), _answer([True, False])],
    ids=["no-data", "zero-norm", "base64", "booleans"],
)
def test_answers_without_a_perturbable_vector_pass_unchanged(payload: Payload) -> None:
    assert perturb_embeddings(payload, 0.1) is None


def test_a_scale_that_is_not_positive_is_refused() -> None:
    with pytest.raises(ValueError, match="perturb_scale"):
        FaultOptions(perturb_scale=0.0)
