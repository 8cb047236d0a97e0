"""How long the startup gate's over-long prompt must be: sized from what the servers say.

A fixed 12,000-word prompt fits a server with a long context (it is then served, and the gate
learns nothing), and on a short one it costs a tokenizer pass over far more text than needed. So:

1. each side's context length, in tokens, from what it says about itself (`/v1/models`
   `max_model_len` and kin, llama.cpp's `/props` `n_ctx`); the larger of the two is the one to
   exceed;
2. the tokens one filler word costs, counted by the server's own tokenizer (vLLM's and
   llama.cpp's `/tokenize`, llama-cpp-python's `/extras/tokenize`), else by `usage.prompt_tokens`
   of a 1-token completion of a known number of words;
3. words = 1.25 × the context / tokens per word, and at least the configured minimum.

A context that cannot be discovered is said so (`context_tokens` None): the configured word count
is sent, and the gate reports the over-long check as not measured unless the baseline rejected
it — a prompt of unknown length relative to the context proves nothing when it is served.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from servegate.config.models import GateConfig
from servegate.endpoints.protocol import Endpoint
from servegate.environment.server import model_fields, props_fields
from servegate.gates.pair import EndpointPair
from servegate.gates.tokenizer import answer_json, server_tokens

IMPOSSIBLE_WORD = "hello "
# The prompt exceeds the larger context by this factor, so a tokenizer that counts a little
# differently (a BOS, a chat template) cannot bring it back inside.
OVERSHOOT = 1.25
SAMPLE_WORDS = 64


@dataclass(frozen=True)
class ImpossibleSize:
    """The over-long prompt's length and how it was found."""

    words: int
    context_tokens: dict[str, int | None]  # per side, None where it could not be discovered
    context_source: dict[str, str]  # per side: where the number came from, or why none
    tokens_per_word: float | None = None
    tokens_source: str = ""

    @property
    def target_tokens(self) -> int | None:
        known = [t for t in self.context_tokens.values() if t is not None]
        return math.ceil(max(known) * OVERSHOOT) if known else None

    def describe(self) -> str:
        """One line: the words sent, against which context."""
        if self.target_tokens is None:
            why = "; ".join(f"{s}: {w}" for s, w in self.context_source.items())
            return f"{self.words} words; the context could not be discovered ({why})"
        ctx = ", ".join(
            f"{s} {t if t is not None else '?'}" for s, t in self.context_tokens.items()
        )
        return (
            f"{self.words} words ≈ {self.words * (self.tokens_per_word or 1):.0f} tokens "
            f"({self.tokens_source}), {OVERSHOOT:g} × the larger context (tokens: {ctx})"
        )


# How servers name their context when they reject a prompt too long for it: llama-cpp-python
# ("exceed context window of 4096"), vLLM/OpenAI ("maximum context length is 4096 tokens"),
# llama.cpp server ("exceeds the available context size (4096 tokens)").
_CONTEXT_IN_ERROR = (
    re.compile(r"context window of (\d+)"),
    re.compile(r"maximum context length is (\d+)"),
    re.compile(r"context size \((\d+) tokens\)"),
    re.compile(r"max_model_len[^0-9]{0,20}(\d+)"),
)


def context_in_error(message: str) -> int | None:
    """The context length a rejection message names, if it names one."""
    for pattern in _CONTEXT_IN_ERROR:
        if found := pattern.search(message):
            return int(found.group(1))
    return None


async def discover_context(
    pair: EndpointPair, ep: Endpoint, deadline_s: float, gate: str
) -> tuple[int | None, str]:
    """One side's context length in tokens and where it came from; (None, why) when the server
    does not say."""
    probe = pair.recording(ep, gate=gate, probe="context")
    listing = answer_json(await probe.raw("GET", "/models", deadline_s=deadline_s))
    fields = model_fields(listing, pair.model)
    if "server.max_context" not in fields:
        props = answer_json(await probe.raw("GET", "../props", deadline_s=deadline_s))
        fields = props_fields(props)
    value = fields.get("server.max_context")
    if value is None or not value.isdigit() or int(value) <= 0:
        return None, "no context length in /v1/models or /props"
    return int(value), fields.get("server.max_context.source", "")


async def _tokens_per_word(
    pair: EndpointPair, ep: Endpoint, deadline_s: float, gate: str
) -> tuple[float | None, str]:
    """Tokens per filler word, by the server's own count of SAMPLE_WORDS of them."""
    probe = pair.recording(ep, gate=gate, probe="context:tokenize")
    text = IMPOSSIBLE_WORD * SAMPLE_WORDS
    ids, how = await server_tokens(probe, pair.model, text, deadline_s)
    if ids:
        return len(ids) / SAMPLE_WORDS, how.replace("tokenized", "counted")
    answer = await probe.completion(
        pair.body({"prompt": text, "max_tokens": 1, "temperature": 0}), deadline_s=deadline_s
    )
    if answer.ok and answer.usage is not None and answer.usage.prompt_tokens:
        return answer.usage.prompt_tokens / SAMPLE_WORDS, "counted by usage.prompt_tokens"
    return None, "no tokenizer endpoint and no usage.prompt_tokens"


async def size(pair: EndpointPair, cfg: GateConfig, gate: str) -> ImpossibleSize:
    """The over-long prompt for both sides: past the larger discovered context."""
    dl = cfg.probe_deadline_s
    found = {
        side: await discover_context(pair, ep, dl, gate)
        for side, ep in (("baseline", pair.baseline), ("candidate", pair.candidate))
    }
    contexts = {side: t for side, (t, _) in found.items()}
    sources = {side: why for side, (_, why) in found.items()}
    known = [t for t in contexts.values() if t is not None]
    if not known:
        return ImpossibleSize(cfg.impossible_prompt_words, contexts, sources)
    per_word, how = await _tokens_per_word(pair, pair.baseline, dl, gate)
    if per_word is None:
        per_word, how = 1.0, f"{how}: assumed 1 token per word"
    words = math.ceil(max(known) * OVERSHOOT / per_word)
    return ImpossibleSize(max(words, 16), contexts, sources, per_word, how)
