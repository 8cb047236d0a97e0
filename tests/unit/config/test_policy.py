"""The policy is real: every key is read by a gate, documented with a unit and a reason."""

import re
from pathlib import Path

import pytest

from servegate.config.loader import ConfigError, validate
from servegate.config.models import (
    CanaryPolicy,
    NumericsPolicy,
    Policy,
    SamplingPolicy,
    Tolerance,
)
from servegate.config.reference import policy_reference

ROOT = Path(__file__).resolve().parents[3]
JUDGES = [
    p for d in ("gates", "verdict", "canary") for p in (ROOT / "src/servegate" / d).rglob("*.py")
]


def test_docs_policy_md_is_the_generated_reference() -> None:
    assert (ROOT / "docs/policy.md").read_text(encoding="utf-8") == policy_reference(), (
        "docs/policy.md is stale: run `servegate policy > docs/policy.md`"
    )


@pytest.mark.parametrize(
    "key", [k for k in Policy.model_fields if k not in ("tolerance", "models")]
)
def test_every_policy_key_is_read_by_a_gate(key: str) -> None:
    pattern = re.compile(rf"policy\.{key}\b")
    assert any(pattern.search(p.read_text(encoding="utf-8")) for p in JUDGES), key


@pytest.mark.parametrize("key", list(Tolerance.model_fields))
def test_every_tolerance_key_is_read_by_a_gate(key: str) -> None:
    pattern = re.compile(rf"(tol|tolerance_for\([^)]*\))\.{key}\b")
    assert any(pattern.search(p.read_text(encoding="utf-8")) for p in JUDGES), key


@pytest.mark.parametrize("key", list(CanaryPolicy.model_fields))
def test_every_canary_key_is_read_by_the_canary(key: str) -> None:
    pattern = re.compile(rf"policy\.canary\.{key}\b")
    assert any(pattern.search(p.read_text(encoding="utf-8")) for p in JUDGES), key


@pytest.mark.parametrize("key", list(SamplingPolicy.model_fields))
def test_every_sampling_key_is_read_by_the_sampling_gate(key: str) -> None:
    pattern = re.compile(rf"(policy\.sampling|\bsp)\.{key}\b")  # sp = policy.sampling
    gate = (ROOT / "src/servegate/gates/sampling").rglob("*.py")
    assert any(pattern.search(p.read_text(encoding="utf-8")) for p in gate), key


@pytest.mark.parametrize("model", [Policy, Tolerance, CanaryPolicy, NumericsPolicy, SamplingPolicy])
def test_every_key_has_a_unit_and_a_reason(
    model: type[Policy]
    | type[Tolerance]
    | type[CanaryPolicy]
    | type[NumericsPolicy]
    | type[SamplingPolicy],
) -> None:
    for name, field in model.model_fields.items():
        if name in ("tolerance", "models", "canary", "numerics", "sampling"):
            continue
        assert isinstance(field.json_schema_extra, dict), name
        assert field.json_schema_extra.get("unit"), name
        assert len(field.description or "") > 40, name


def test_a_model_entry_overrides_only_the_keys_it_sets() -> None:
    policy = validate(
        Policy,
        {"tolerance": {"dlogprob_nats": 0.2}, "models": {"m": {"perplexity_shift_nats": 0.05}}},
        "policy.yaml",
    )
    own = policy.tolerance_for("m")
    assert (own.dlogprob_nats, own.perplexity_shift_nats) == (0.2, 0.05)
    assert policy.tolerance_for("other").perplexity_shift_nats == 0.01


def test_a_misspelt_tolerance_key_names_its_path() -> None:
    with pytest.raises(ConfigError, match=r"policy.yaml: models\.m\.dlogprob: Extra inputs"):
        validate(Policy, {"models": {"m": {"dlogprob": 0.2}}}, "policy.yaml")
