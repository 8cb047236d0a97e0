"""The execution-path matrix file of `servegate matrix FILE`: one shared baseline, one candidate
per entry, each entry declaring the path it runs (the seed's release matrix).

```yaml
baseline: {url: http://10.0.0.1:8000/v1}    # or baseline_run: NAME (a stored baseline)
# or a launched one shared by the entries of a node: {launch: {...}, shared: node,
#                                                    resources: {gpus: 1}}
settings: {gates: [startup, numerics, golden], categories: [canary]}   # GateConfig keys
entries:
  - name: fp8-tp2-graph
    url: http://10.0.0.2:8000/v1             # or launch: {command: [...]}
    engine_version: vllm 0.25.1
    hardware: H200
    tp: 2                                    # pp: 1; on Ray the entry asks for tp x pp GPUs
    execution: graph
    attention_backend: flashinfer
    quantization: fp8
    fusion: [rms_norm_quant]
    activation_dtype: bf16
    norm_dtype: fp32
    resources: {gpus: 2, cpus: 4, accelerator_type: H200, custom: {nvlink: 1}}   # --ray only
```

Every key is known: an unknown one is a one-line error naming it, before anything runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from servegate.config.loader import ConfigError, read_yaml, relative_to, validate
from servegate.config.models import EndpointConfig, GateConfig, LaunchConfig

# The declared fields, in the order the matrix table shows them.
MATRIX_FIELDS = (
    "model",
    "engine_version",
    "hardware",
    "tp",
    "pp",
    "execution",
    "attention_backend",
    "quantization",
    "fusion",
    "activation_dtype",
    "norm_dtype",
)
STORED_PLACEHOLDER = "http://stored-baseline.invalid/v1"  # checked before the stored URL is read
# Run settings an entry cannot set: the matrix gives them.
NOT_SETTINGS = frozenset({"baseline", "candidate", "baseline_run", "model"})


class EntryResources(BaseModel):
    """What one entry needs from a node of a Ray cluster (`servegate matrix --ray`); ignored by a
    local run. `gpus` defaults to tp x pp when the entry declares either, else 0."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    cpus: float = Field(default=1, ge=0)
    gpus: float | None = Field(default=None, ge=0)
    accelerator_type: str | None = Field(default=None, min_length=1)
    custom: dict[str, float] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _positive(self) -> EntryResources:
        for name, amount in self.custom.items():
            if amount <= 0:
                raise ValueError(f"custom.{name}: a resource amount must be above 0")
            if name in ("CPU", "GPU", "memory", "object_store_memory"):
                raise ValueError(f"custom.{name}: give it as cpus/gpus, not as a custom resource")
        return self


class MatrixEntry(BaseModel):
    """One candidate of the matrix and the execution path it declares."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1, max_length=100)
    url: str | None = None
    api_key_env: str | None = None
    launch: LaunchConfig | None = None
    model: str | None = None
    engine_version: str | None = None
    hardware: str | None = None
    tp: int | None = Field(default=None, ge=1)
    pp: int | None = Field(default=None, ge=1)
    execution: Literal["eager", "graph"] | None = None
    attention_backend: str | None = None
    quantization: str | None = None
    fusion: tuple[str, ...] = ()
    activation_dtype: str | None = None
    norm_dtype: str | None = None
    resources: EntryResources | None = None

    def needs(self) -> dict[str, float]:
        """The node resources this entry asks a Ray cluster for, in Ray's names (`CPU`, `GPU`,
        `accelerator_type:H200`, custom ones); an amount of 0 is left out."""
        given = self.resources or EntryResources()
        gpus = given.gpus
        if gpus is None:
            gpus = (self.tp or 1) * (self.pp or 1) if (self.tp or self.pp) else 0
        out = {"CPU": given.cpus, "GPU": float(gpus), **given.custom}
        if given.accelerator_type is not None:
            # Ray's own resource for a node's accelerator: a sliver marks the type.
            out[f"accelerator_type:{given.accelerator_type}"] = 0.001
        return {k: v for k, v in out.items() if v > 0}

    def declared(self) -> dict[str, str]:
        """The execution-path fields it sets, as text (recorded in the candidate's fingerprint)."""
        out: dict[str, str] = {}
        for key in MATRIX_FIELDS:
            value = getattr(self, key)
            if value in (None, ()):
                continue
            out[key] = ", ".join(value) if isinstance(value, tuple) else str(value)
        return out

    def endpoint(self) -> EndpointConfig:
        return EndpointConfig(url=self.url, api_key_env=self.api_key_env, launch=self.launch,
                              matrix=self.declared())  # fmt: skip


BaselineSharing = Literal["entry", "node"]


class MatrixBaseline(EndpointConfig):
    """The matrix's baseline: an endpoint, plus for a `launch` block who shares one launch.
    `shared: entry` (the default) starts it once per entry; `shared: node` once per node that
    runs an entry (locally: once for the whole run), reused by every entry there. `resources`
    is what one such baseline needs from a Ray node (`--ray` only; nothing unless given)."""

    shared: BaselineSharing = "entry"
    resources: EntryResources | None = None

    @model_validator(mode="after")
    def _shared_launch(self) -> MatrixBaseline:
        if self.shared == "node" and self.launch is None:
            raise ValueError(
                "shared: node shares a launched baseline: give a launch block (a url is "
                "already shared by every entry)"
            )
        if self.resources is not None and self.shared != "node":
            raise ValueError("resources: only a baseline with shared: node asks for its own")
        return self

    def endpoint(self) -> EndpointConfig:
        """The plain endpoint each entry's run is given."""
        return EndpointConfig(url=self.url, api_key_env=self.api_key_env, launch=self.launch,
                              matrix=self.matrix)  # fmt: skip

    def needs(self) -> dict[str, float]:
        """What one shared baseline needs from a Ray node, in Ray's names (nothing unless its
        `resources` say): reserved with every entry of a node, so that both always fit."""
        if self.resources is None:
            return {}
        return MatrixEntry(name="baseline", resources=self.resources).needs()


class MatrixFile(BaseModel):
    """The whole file: the shared baseline, the run settings, the entries."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    baseline: MatrixBaseline | None = None
    baseline_run: str | None = None
    settings: dict[str, Any] = Field(default_factory=dict)
    entries: tuple[MatrixEntry, ...] = Field(min_length=1)

    @model_validator(mode="after")
    def _one_baseline(self) -> MatrixFile:
        if (self.baseline is None) == (self.baseline_run is None):
            raise ValueError("give a baseline (url or launch) or a baseline_run, not both")
        names = [e.name for e in self.entries]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"entry names must be unique: {twice[0]!r} is used twice")
        unknown = sorted(set(self.settings) - (set(GateConfig.model_fields) - NOT_SETTINGS))
        if unknown:
            raise ValueError(f"settings.{unknown[0]}: unknown run setting")
        return self

    @property
    def shared_per_node(self) -> bool:
        """One launched baseline per node (locally: per run), shared by the entries there."""
        return self.baseline is not None and self.baseline.shared == "node"

    def config(self, entry: MatrixEntry, source: str, stored_url: str | None = None) -> GateConfig:
        """The GateConfig of one entry's run; `stored_url` is where a stored baseline
        (`baseline_run`) was recorded from."""
        baseline = (
            self.baseline.endpoint()
            if self.baseline is not None
            else EndpointConfig(url=stored_url or STORED_PLACEHOLDER)
        )
        data = {**self.settings, "baseline": baseline, "candidate": entry.endpoint(),
                "baseline_run": self.baseline_run, "model": entry.model}  # fmt: skip
        return validate(GateConfig, data, f"{source}: entry {entry.name!r}")


def load_matrix(path: Path) -> MatrixFile:
    """Read and check a matrix file (every entry's run configuration included)."""
    data = read_yaml(path)
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping with baseline and entries")
    suite = (
        data.get("settings", {}).get("suite") if isinstance(data.get("settings"), dict) else None
    )
    if isinstance(suite, str) and not Path(suite).is_absolute():
        data["settings"]["suite"] = str(path.parent / suite)  # relative to the file
    # Launch folders too, as in a gate file: the matrix runs the same from any folder.
    sides = [data.get("baseline")]
    sides += data["entries"] if isinstance(data.get("entries"), list) else []
    for side in sides:
        launch = side.get("launch") if isinstance(side, dict) else None
        if isinstance(launch, dict) and isinstance(launch.get("cwd"), str):
            launch["cwd"] = relative_to(path.parent, launch["cwd"])
    matrix = validate(MatrixFile, data, str(path))
    for entry in matrix.entries:
        matrix.config(entry, str(path))
    return matrix
