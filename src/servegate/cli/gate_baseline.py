"""`servegate gate --baseline-run NAME`: may this run be compared with that stored baseline?"""

from __future__ import annotations

from typing import Any

from servegate.config.loader import ConfigError
from servegate.config.models import GateConfig
from servegate.config.redaction import redact_config
from servegate.store.baselines import StoredBaseline
from servegate.store.resume import changed

# What a run against a stored baseline may set anew: which servers (the baseline's is the one it
# was recorded from) and where their logs go, how long to wait, how strictly to judge what was
# not measured, the load of the performance gate, which a stored baseline does not measure, and
# when the baseline's own noise is read (a recording always holds it: `baseline_paths`).
# Everything else (policy, suite, categories, prompts, model) must be what it was recorded with.
FREE_KEYS = frozenset(
    {
        "baseline",
        "candidate",
        "baseline_replica",
        "baseline_run",
        "gates",
        "request_deadline_s",
        "probe_deadline_s",
        "run_deadline_s",
        "hung_after_timeouts",
        "strict",
        "performance",
        "run_dir",
        "log_patterns",
        "baseline_paths",
    }
)


def _comparable(config: dict[str, Any]) -> dict[str, Any]:
    # The stored configuration has its secrets hidden: the given one is compared hidden too.
    return {k: v for k, v in redact_config(config).items() if k not in FREE_KEYS}


def check_baseline_config(baseline: StoredBaseline, cfg: GateConfig) -> None:
    """ConfigError (one line) when `cfg` asks what the baseline was not recorded with."""
    recorded = GateConfig.model_validate(baseline.config)
    where = f"cannot compare with the stored baseline {baseline.name!r}"
    missing = [g for g in cfg.gates if g != "performance" and g not in recorded.gates]
    if missing:
        raise ConfigError(
            f"{where}: it was recorded without the {missing[0]} gate (recorded: "
            f"{', '.join(recorded.gates)}); choose --gates among them or record it again"
        )
    why = changed(
        _comparable(recorded.model_dump(mode="json")),
        _comparable(cfg.model_dump(mode="json")),
        "it was recorded with another setting",
    )
    if why is not None:
        raise ConfigError(f"{where}: {why}; give the same options, or record it again")
