"""Gate 5 on live traffic: a proxy that serves users from the primary (or, in canary mode, from
the side a CanaryController picks), mirrors a sample to the candidate, compares each pair with
the gates' own comparisons, exports content metrics to Prometheus and records pairs, redacted."""

from servegate.proxy.app import HEALTH_PATH, METRICS_PATH, Proxy
from servegate.proxy.comparison import PairComparison, compare_pair
from servegate.proxy.settings import ProxySettings, ProxySettingsError, Upstream

__all__ = [
    "HEALTH_PATH",
    "METRICS_PATH",
    "PairComparison",
    "Proxy",
    "ProxySettings",
    "ProxySettingsError",
    "Upstream",
    "compare_pair",
]
