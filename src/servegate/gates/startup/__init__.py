"""Gate 1, startup: the engine comes up and serves, and nothing optional blocks it.

`collect` (I/O: models, a real 1-token completion, the impossible prompt, recovery, capability
discovery, request capacity) and `evaluate` (pure); `launch` judges engines servegate started,
`capacity` the over-capacity request, `sizing` lives beside the gates (context uses it too).
"""

from servegate.gates.startup.collect import NAME, SideEvidence, StartupEvidence, collect, evaluate

__all__ = ["NAME", "SideEvidence", "StartupEvidence", "collect", "evaluate"]
