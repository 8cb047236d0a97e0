"""The policy reference page (docs/policy.md), generated from `Policy` so the two never drift."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from servegate.config.models import (
    CanaryPolicy,
    NumericsPolicy,
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
    return f"`{field.default}`"


def _table(model: type[BaseModel], prefix: str = "") -> list[str]:
    lines = ["| key | default | unit | why |", "|---|---|---|---|"]
    for name, field in model.model_fields.items():
        extra: Any = field.json_schema_extra or {}
        unit = extra.get("unit", "") if isinstance(extra, dict) else ""
        why = " ".join((field.description or "").split())
        lines.append(f"| `{prefix}{name}` | {_default(model, name)} | {unit} | {why} |")
    return lines


def policy_reference() -> str:
    """The whole page, as Markdown."""
    parts = [HEADER, "## Keys", "", *_table(Policy), "", "## Tolerance (per model)", ""]
    parts += [
        (Tolerance.__doc__ or "").strip().splitlines()[0],
        "",
        *_table(Tolerance, "tolerance."),
        "",
        "## Canary (per interval)",
        "",
        " ".join((CanaryPolicy.__doc__ or "").split()),
        "",
        *_table(CanaryPolicy, "canary."),
        "",
        "## Numerics",
        "",
        " ".join((NumericsPolicy.__doc__ or "").split()),
        "",
        *_table(NumericsPolicy, "numerics."),
        "",
        "## Sampling",
        "",
        " ".join((SamplingPolicy.__doc__ or "").split()),
        "",
        *_table(SamplingPolicy, "sampling."),
    ]
    return "\n".join(parts) + "\n"
