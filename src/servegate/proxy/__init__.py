"""Gate 5 on live traffic: a proxy that serves users from the primary (or, in canary mode, from
the side a CanaryController picks), mirrors a sample to the candidate, compares each pair with
the gates' own comparisons, exports content metrics to Prometheus and records pairs, redacted.

The ASGI app (`servegate.proxy.app.Proxy`) needs the `proxy` extra (starlette, uvicorn,
prometheus-client); what is exported here does not, so `servegate replay` (the offline shadow)
runs on the core install.
"""

from servegate.proxy.comparison import PairComparison, compare_pair
from servegate.proxy.settings import ProxySettings, ProxySettingsError, Upstream

__all__ = [
    "PairComparison",
    "ProxySettings",
    "ProxySettingsError",
    "Upstream",
    "compare_pair",
]
