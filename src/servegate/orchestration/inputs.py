"""The files and names a run reads, checked before anything is contacted, launched or created:
a bad suite, a category no probe has or a bad log-pattern file is a one-line ConfigError (exit
2) at the start, not a surprise after the servers were asked."""

from __future__ import annotations

from servegate.config.loader import ConfigError
from servegate.config.models import GateConfig
from servegate.gates.golden.collect import select_probes
from servegate.managed.logscan import load_catalogue

__all__ = ["check_inputs"]


def check_inputs(cfg: GateConfig) -> None:
    """ConfigError naming the first bad input of `cfg`: its suite file (it must parse), each
    category (some probe of the suite must have it) and its log-pattern file (it must parse,
    even when no side is launched: a file given and never read would hide the mistake)."""
    suite = select_probes(cfg.model_copy(update={"categories": None}))
    unknown = [c for c in cfg.categories or () if c not in suite.categories()]
    if unknown:
        raise ConfigError(
            f"category {unknown[0]!r}: no probe of the suite {suite.name} has it "
            f"(its categories: {', '.join(suite.categories())})"
        )
    if cfg.log_patterns is not None:
        load_catalogue(cfg.log_patterns)
