"""`servegate gate --resume RUN`: the configuration a resumed run continues with."""

from __future__ import annotations

from typing import Any

from servegate.config.loader import ConfigError, validate
from servegate.config.models import GateConfig
from servegate.store.resume import ResumePoint, changed

# Keys that do not change what is measured: a resume may set them anew.
FREE_KEYS = frozenset({"run_deadline_s"})


def _comparable(config: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in config.items() if k not in FREE_KEYS}


def resumed_config(
    point: ResumePoint, given: GateConfig | None, *, run_deadline_s: float | None
) -> GateConfig:
    """The stored configuration of the run (`given`, built from the command line, must equal
    it except for the run deadline), with a new run deadline when one was given."""
    stored = validate(GateConfig, point.config, f"the stored configuration of run {point.run_id}")
    if given is not None:
        why = changed(
            _comparable(stored.model_dump(mode="json")),
            _comparable(given.model_dump(mode="json")),
            "the configuration",
        )
        if why is not None:
            raise ConfigError(
                f"cannot resume run {point.run_id}: {why}; give the command line that started "
                "it, or --resume RUN alone"
            )
        run_deadline_s = run_deadline_s if run_deadline_s is not None else given.run_deadline_s
    if run_deadline_s is None:
        return stored
    return stored.model_copy(update={"run_deadline_s": run_deadline_s})
