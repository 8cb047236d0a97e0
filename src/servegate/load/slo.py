"""Service-level objectives for goodput: defined in `servegate.config.slo` (they are user input,
validated with the rest of the configuration) and re-exported here for the load generator."""

from servegate.config.slo import SLO, SLO_KEYS, SLOError, parse_slo

__all__ = ["SLO", "SLO_KEYS", "SLOError", "parse_slo"]
