"""The reference pages generated from the configuration models so the two never drift: the
verdict policy (docs/policy.md, from `Policy`) and the gate configuration file (docs/config.md,
from `GateConfig`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from enum import Enum
from pathlib import PurePath
from typing import Any

import yaml
from pydantic import BaseModel

from servegate.config.models import (
    CanaryPolicy,
    EndpointConfig,
    GateConfig,
    LaunchConfig,
    NumericsPolicy,
    PerformanceConfig,
    Policy,
    SamplingPolicy,
    Tolerance,
)

HEADER = """# Policy reference

`servegate gate --policy FILE` reads a YAML file with any of these keys; the rest keep their
defaults. Every tolerance has a unit and a reason. Generated from `servegate.config.models.Policy`
(`servegate policy` prints this page); a test keeps it in step with the code.

Drift limits are `noise_k × floor + tolerance`: the floor is what the baseline does against
itself (A/A and its own paths: cache hit vs miss, streamed vs not, alongside another request, a
replica), the tolerance is per model (`tolerance`, overridden per model name under `models`).

```yaml
noise_k: 3.0
tolerance:
  dlogprob_nats: 0.10
models:
  my-org/my-model:            # the model name servegate sends
    perplexity_shift_nats: 0.02
```
"""


def _default(model: type[BaseModel], name: str) -> str:
    field = model.model_fields[name]
    if field.default_factory is not None:
        return "(see below)" if name in ("tolerance", "canary", "numerics") else "{}"
    return f"`{yaml_value(field.default)}`"


def yaml_value(value: Any) -> str:
    """`value` as it is written in a YAML file (a list in brackets, `null`), so a default can be
    copied from the page into a policy or config file."""
    if isinstance(value, tuple | list):
        value = [v.value if isinstance(v, Enum) else v for v in value]
    elif isinstance(value, Enum):
        value = value.value
    elif isinstance(value, PurePath):
        value = str(value)
    text: str = yaml.safe_dump(value, default_flow_style=True, allow_unicode=True)
    return text.removesuffix("\n...\n").strip()


def _table(model: type[BaseModel], prefix: str = "") -> list[str]:
    lines = ["| key | default | unit | why |", "|---|---|---|---|"]
    for name, field in model.model_fields.items():
        extra: Any = field.json_schema_extra or {}
        unit = extra.get("unit", "") if isinstance(extra, dict) else ""
        why = " ".join((field.description or "").split())
        lines.append(f"| `{prefix}{name}` | {_default(model, name)} | {unit} | {why} |")
    return lines


def _doc(model: type[BaseModel]) -> str:
    return " ".join((model.__doc__ or "").split())


def _section(title: str, intro: str, table: list[str]) -> list[str]:
    return [f"## {title}", "", *([intro, ""] if intro else []), *table, ""]


def policy_reference() -> str:
    """The whole page, as Markdown."""
    parts = [
        HEADER,
        *_section("Keys", "", _table(Policy)),
        *_section(
            "Tolerance (per model)",
            (Tolerance.__doc__ or "").strip().splitlines()[0],
            _table(Tolerance, "tolerance."),
        ),
        *_section("Canary (per interval)", _doc(CanaryPolicy), _table(CanaryPolicy, "canary.")),
        *_section("Numerics", _doc(NumericsPolicy), _table(NumericsPolicy, "numerics.")),
        *_section("Sampling", _doc(SamplingPolicy), _table(SamplingPolicy, "sampling.")),
    ]
    return "\n".join(parts).rstrip("\n") + "\n"


CONFIG_HEADER = """# Gate configuration file

`servegate gate --config FILE` reads a YAML file with these keys (`yaml.safe_load`; an unknown
or misspelt key is refused, naming it). An option given on the command line overrides its key
(the *option* column); the others keep the file's values, then the defaults. Relative paths
(`suite`, `log_patterns`, a launch's `cwd`) are taken from the file's folder. Generated from
`servegate.config.models.GateConfig` (`servegate policy --config-keys` prints this page); a test
keeps it in step with the code. The verdict policy's keys are in [policy.md](policy.md).

```yaml
baseline: {url: http://10.0.0.1:8000/v1}
candidate:
  launch:                       # servegate starts and stops this side itself
    command: vllm serve my-org/my-model --served-model-name my-model --port {port}
    ready_timeout_s: 1800
  matrix: {engine_version: "0.32.0", hardware: H100}
model: my-model
request_deadline_s: 120         # --deadline-s
performance: {concurrency: 8}   # --perf-concurrency
```
"""

_NESTED = {"baseline", "candidate", "baseline_replica", "launch", "performance", "policy"}


def _config_table(
    model: type[BaseModel], prefix: str, flags: Mapping[str, Sequence[str]]
) -> list[str]:
    lines = ["| key | option | default | meaning |", "|---|---|---|---|"]
    for name, field in model.model_fields.items():
        key = f"{prefix}{name}"
        option = ", ".join(f"`{f}`" for f in flags.get(key, ())) or "—"
        if name in _NESTED:
            below = "(policy.md)" if name == "policy" else "(below)"
            default = f"required {below}" if field.is_required() else below
        elif field.is_required():
            default = "required"
        elif field.default_factory is not None:
            default = "`{}`"
        else:
            default = f"`{yaml_value(field.default)}`"
        meaning = " ".join((field.description or "").split())
        lines.append(f"| `{key}` | {option} | {default} | {meaning} |")
    return lines


def config_reference(flags: Mapping[str, Sequence[str]]) -> str:
    """The gate configuration page, as Markdown; `flags` maps a key path to the command-line
    options that set it."""
    sides = _config_table(EndpointConfig, "baseline.", flags)
    sides += _config_table(EndpointConfig, "candidate.", flags)[2:]
    parts = [
        CONFIG_HEADER,
        *_section("Keys", "", _config_table(GateConfig, "", flags)),
        *_section(
            "Each side (`baseline`, `candidate`, `baseline_replica`)", _doc(EndpointConfig), sides
        ),
        *_section(
            "A side's `launch` block",
            _doc(LaunchConfig),
            _config_table(LaunchConfig, "baseline.launch.", flags),
        ),
        *_section(
            "Performance",
            _doc(PerformanceConfig),
            _config_table(PerformanceConfig, "performance.", flags),
        ),
    ]
    return "\n".join(parts).rstrip("\n") + "\n"
