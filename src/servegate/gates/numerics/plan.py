"""What the numerics gate sends and what it observed (no judgement here)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from servegate.endpoints.types import Completion
from servegate.gates.numerics.echo_route import EchoCheck
from servegate.gates.numerics.noise import NoiseFloor, ProbeRequest
from servegate.gates.numerics.perplexity import CrossEcho, TextScore
from servegate.gates.pair import Api

PROMPTS: tuple[tuple[str, str], ...] = (
    ("capital", "What is the capital of France?"),
    ("arithmetic", "What is 12 plus 7? Answer with a number."),
    ("count", "Count from 1 to 10, separated by commas."),
    ("code", "Write a Python function that returns the square of a number."),
    ("chinese", "用一句话介绍北京。"),
    ("translate", "Translate 'good morning, my friend' to French."),
    ("story", "Begin a short story about a lighthouse keeper."),
    ("science", "Explain in one sentence why the sky is blue."),
    ("colours", "List three primary colours."),
    ("json", 'Give a JSON object with keys "name" and "age" for a fictional person.'),
    ("definition", "Define the word 'entropy' briefly."),
    ("reasoning", "A train travels 60 km in one hour. How far does it go in three hours?"),
)
ROW_DRIFT = "numerical drift"
ROW_PERPLEXITY = "perplexity shift"
ROW_HANGS = "hangs"


@dataclass(frozen=True)
class NumericsConfig:
    """What the numerics gate sends; every threshold lives in `Policy`."""

    prompts: tuple[tuple[str, str], ...] = PROMPTS
    max_tokens: int = 24
    top_logprobs: int = 5
    measure_noise: bool = True
    perplexity: bool = True
    cross_scoring: bool = True


@dataclass(frozen=True)
class PromptObservation:
    request: ProbeRequest
    baseline: Completion
    candidate: Completion
    cross: CrossEcho | None = None


@dataclass(frozen=True)
class NumericsEvidence:
    observations: tuple[PromptObservation, ...]
    noise: NoiseFloor
    baseline_url: str
    candidate_url: str
    model: str | None = None
    # per side ("baseline", "candidate"): its echo logprobs against its generation logprobs
    echo: dict[str, EchoCheck] = field(default_factory=dict)
    texts: tuple[TextScore, ...] = ()
    scoring_note: str = ""  # texts left out for the scoring budget, when any


def probe_request(api: Api, prompt: str, opts: NumericsConfig) -> dict[str, Any]:
    """A greedy request for tokens with top-k logprobs, in the chat or the legacy shape."""
    body: dict[str, Any] = {"max_tokens": opts.max_tokens, "temperature": 0}
    if api == "chat":
        messages = [{"role": "user", "content": prompt}]
        return {**body, "messages": messages, "logprobs": True, "top_logprobs": opts.top_logprobs}
    return {**body, "prompt": prompt, "logprobs": opts.top_logprobs}
