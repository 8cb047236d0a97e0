"""`servegate gate --resume RUN`: the configuration a resumed run continues with."""

from __future__ import annotations

from typing import Any

from servegate.config.loader import ConfigError, validate
from servegate.config.models import GateConfig
from servegate.config.redaction import redact_config
from servegate.store.resume import ResumePoint, changed

# Keys that do not change what is measured: a resume may set them anew.
FREE_KEYS = frozenset({"run_deadline_s"})


def _comparable(config: dict[str, Any]) -> dict[str, Any]:
    # The stored configuration has its secrets hidden: the given one is compared hidden too.
    return {k: v for k, v in redact_config(config).items() if k not in FREE_KEYS}


def resumed_config(
    point: ResumePoint, given: GateConfig | None, *, run_deadline_s: float | None
) -> GateConfig:
    """The configuration the run continues with: `given` (built from the command line, it must
    equal the stored one except for the run deadline), else the stored one — which a run with a
    `launch` block cannot use, its secrets not being stored."""
    stored = validate(GateConfig, point.config, f"the stored configuration of run {point.run_id}")
    if given is None:
        if stored.baseline.launch is not None or stored.candidate.launch is not None:
            raise ConfigError(
                f"cannot resume run {point.run_id} from the database alone: its launch blocks' "
                "environment and key-like flags were not stored; give the configuration that "
                "started it (--config FILE) with --resume"
            )
        chosen = stored
    else:
        why = changed(
            _comparable(stored.model_dump(mode="json")),
            _comparable(given.model_dump(mode="json")),
            "the configuration changed since the run started",
        )
        if why is not None:
            raise ConfigError(
                f"cannot resume run {point.run_id}: {why}; give the command line that started "
                "it, or --resume RUN alone"
            )
        chosen = given.model_copy(update={"run_deadline_s": stored.run_deadline_s})
        run_deadline_s = run_deadline_s if run_deadline_s is not None else given.run_deadline_s
    if run_deadline_s is None:
        return chosen
    return chosen.model_copy(update={"run_deadline_s": run_deadline_s})
