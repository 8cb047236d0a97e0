"""Synthetic prompts of a controlled length, deterministic from a seed and the request's index.

A prompt is a short instruction followed by words drawn from a list of common English words that
are one token each (with their leading space) in the usual BPE vocabularies (checked against
SmolLM2's: every word is one token). The length is therefore approximate in *tokens*: the chat
template adds its own, so the run reports the server's `usage.prompt_tokens` against the request.
Each request draws its own words, so no two prompts share a cacheable prefix beyond the
instruction.
"""

from __future__ import annotations

import random

__all__ = ["INSTRUCTION", "INSTRUCTION_TOKENS", "WORDS", "synthetic_prompt"]

INSTRUCTION = "Write a long story that uses these words:"
INSTRUCTION_TOKENS = 9  # SmolLM2's tokenizer; other BPE vocabularies are within a token or two

_WORD_TEXT = (
    "time year people way day man thing woman life child world school state family group "
    "country problem hand part place case week company system program question work number "
    "night point home water room mother area money story fact month lot right study book eye "
    "job word business issue side kind head house service friend father power hour game line "
    "end member law car city name team minute idea body back parent face level office door "
    "health person art war history party result change morning reason girl moment air teacher "
    "force order river tree bird garden road window table chair paper music light color field "
    "summer winter island horse ship stone bread milk letter voice dream heart king village "
    "market bridge forest mountain cloud rain snow fire glass box ball dog cat fish apple sky"
)
WORDS = tuple(_WORD_TEXT.split())


def synthetic_prompt(seed: int, index: int, input_tokens: int) -> str:
    """The prompt of request `index` in a run seeded with `seed`: about `input_tokens` tokens
    before the chat template (the instruction, then one word per remaining token)."""
    if input_tokens < 1:
        raise ValueError(f"input_tokens must be at least 1, got {input_tokens}")
    # A string seed is hashed with SHA-512 by `random`: stable across runs and Python versions.
    rng = random.Random(f"servegate-synthetic:{seed}:{index}")
    count = max(input_tokens - INSTRUCTION_TOKENS, 1)
    return INSTRUCTION + " " + " ".join(rng.choices(WORDS, k=count))
