"""Gate 1, startup: the engine comes up and serves, and nothing optional blocks it.

`plan` (the ready request and the evidence types), `collect` (I/O: models, a real 1-token
completion, the impossible prompt, recovery, capability discovery, request capacity),
`judgement` (pure `evaluate`); `launch` judges engines servegate started, `capacity` the
over-capacity request, `sizing` lives beside the gates (context uses it too).
"""

from servegate.gates.startup.collect import collect
from servegate.gates.startup.judgement import evaluate
from servegate.gates.startup.plan import NAME, SideEvidence, StartupEvidence

__all__ = ["NAME", "SideEvidence", "StartupEvidence", "collect", "evaluate"]
