"""The embeddings gate: `/v1/embeddings`, `/score` and `/rerank` against the baseline's noise.

`plan` (the shipped inputs and what is sent), `collect` (I/O), `judgement` (pure `evaluate`).
"""

from servegate.gates.embeddings.collect import collect
from servegate.gates.embeddings.judgement import evaluate
from servegate.gates.embeddings.plan import NAME, EmbeddingsEvidence, shipped_inputs

__all__ = ["NAME", "EmbeddingsEvidence", "collect", "evaluate", "shipped_inputs"]
