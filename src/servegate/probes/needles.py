"""RULER-style needle-in-a-haystack probes, generated from a seed: no external data, same bytes
on every machine.

A haystack is filler sentences built from small word lists (no digits, so the needle's number is
the only number in the document). One needle, "The secret code for <name> is <number>.", sits at
the start, the middle or the end, and the question asks for it. Lengths are targets in tokens,
estimated at ~1.3 tokens per English word; the gate reports the server's own `prompt_tokens`.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

Position = Literal["start", "middle", "end"]
POSITIONS: tuple[Position, ...] = ("start", "middle", "end")
TOKENS_PER_WORD = 1.3
# Chat template, needle and question together stay under this many tokens; subtracted from the
# target so a "3000-token" probe is about 3000 tokens in total, not 3000 plus the question.
OVERHEAD_TOKENS = 40

_ADJECTIVES = (
    "quiet", "green", "old", "bright", "small", "heavy", "gentle", "distant", "warm", "narrow",
    "wooden", "silver", "patient", "curious", "tall", "pale", "busy", "calm", "wide", "golden",
)  # fmt: skip
_NOUNS = (
    "river", "farmer", "garden", "window", "teacher", "bridge", "forest", "lantern", "market",
    "painter", "harbor", "meadow", "library", "baker", "valley", "orchard", "sailor", "tower",
    "village", "musician",
)  # fmt: skip
_VERBS = (
    "watches", "passes", "follows", "greets", "crosses", "remembers", "paints", "visits",
    "circles", "admires", "guards", "leaves", "finds", "carries", "describes",
)  # fmt: skip
_PLACES = (
    "before dawn", "after the rain", "in the afternoon", "near the hills", "by the old road",
    "under a cloudy sky", "during the festival", "at the edge of town", "along the coast",
    "beside the fountain",
)  # fmt: skip
# Needle names never occur in the filler, so the question has exactly one answer.
_NAMES = (
    "Orion", "Juniper", "Calypso", "Aurelia", "Thaddeus", "Wren", "Isolde", "Caspian", "Marisol",
    "Peregrine", "Lysander", "Odalys", "Fenwick", "Seraphine", "Barnaby", "Ottoline",
)  # fmt: skip

_DIGIT_SEPARATOR = re.compile(r"(?<=\d)[\s,._'-](?=\d)")


@dataclass(frozen=True)
class Needle:
    """One generated probe: the document with the needle in it, the question, and the answer."""

    seed: int
    target_tokens: int
    position: Position
    name: str
    code: str
    haystack: str
    question: str

    @property
    def id(self) -> str:
        """Stable probe id, e.g. `needle-1500-middle`."""
        return f"needle-{self.target_tokens}-{self.position}"

    @property
    def sentence(self) -> str:
        """The needle sentence as it appears in the haystack."""
        return needle_sentence(self.name, self.code)

    @property
    def prompt(self) -> str:
        """The whole user message: document, blank line, question."""
        return f"{self.haystack}\n\n{self.question}"

    @property
    def estimated_tokens(self) -> int:
        return estimate_tokens(self.prompt) + OVERHEAD_TOKENS // 2

    def request(self, max_tokens: int = 16, follow_up: str = "") -> dict[str, Any]:
        """A greedy chat request asking the question, then `follow_up` if given."""
        content = f"{self.prompt} {follow_up}" if follow_up else self.prompt
        return {
            "messages": [{"role": "user", "content": content}],
            "max_tokens": max_tokens,
            "temperature": 0,
        }

    def recalled(self, answer: str | None) -> bool:
        """Whether the answer contains the needle's number."""
        return recalled(self.code, answer)


def needle_sentence(name: str, code: str) -> str:
    return f"The secret code for {name} is {code}."


def estimate_tokens(text: str) -> int:
    """Rough token count of English text: ~1.3 tokens per whitespace-separated word."""
    return round(len(text.split()) * TOKENS_PER_WORD)


def recalled(code: str, answer: str | None) -> bool:
    """True when `code` appears in `answer` as a whole number; digit groupings such as
    "4 812 907" or "4,812,907" count, a longer number that merely contains it does not."""
    if not answer:
        return False
    joined = _DIGIT_SEPARATOR.sub("", answer)
    return re.search(rf"(?<!\d){re.escape(code)}(?!\d)", joined) is not None


def filler_sentences(rng: random.Random, words: int) -> list[str]:
    """Filler sentences totalling at least `words` words."""
    out: list[str] = []
    total = 0
    while total < words:
        sentence = (
            f"The {rng.choice(_ADJECTIVES)} {rng.choice(_NOUNS)} {rng.choice(_VERBS)} "
            f"the {rng.choice(_ADJECTIVES)} {rng.choice(_NOUNS)} {rng.choice(_PLACES)}."
        )
        out.append(sentence)
        total += len(sentence.split())
    return out


def _insert_at(count: int, position: Position) -> int:
    return {"start": 0, "middle": count // 2, "end": count}[position]


def make_needle(seed: int, target_tokens: int, position: Position) -> Needle:
    """The needle probe for (`seed`, `target_tokens`, `position`), identical on every call.
    The haystack depends on seed and length only, so positions differ only where the needle is."""
    if position not in POSITIONS:
        raise ValueError(f"position must be one of {POSITIONS}, got {position!r}")
    if target_tokens < OVERHEAD_TOKENS + 20:
        raise ValueError(f"target_tokens must be at least {OVERHEAD_TOKENS + 20}")
    hay_rng = random.Random(f"servegate-needles:{seed}:{target_tokens}")
    words = max(1, round((target_tokens - OVERHEAD_TOKENS) / TOKENS_PER_WORD))
    sentences = filler_sentences(hay_rng, words)
    needle_rng = random.Random(f"servegate-needles:{seed}:{target_tokens}:{position}")
    name = needle_rng.choice(_NAMES)
    code = str(needle_rng.randrange(1_000_000, 10_000_000))
    at = _insert_at(len(sentences), position)
    sentences.insert(at, needle_sentence(name, code))
    question = f"What is the secret code for {name}? Answer with the number only."
    return Needle(seed, target_tokens, position, name, code, " ".join(sentences), question)


def needle_grid(
    seed: int, lengths: Iterable[int], positions: Iterable[Position] = POSITIONS
) -> tuple[Needle, ...]:
    """Every (length, position) combination, shortest first, in `positions` order."""
    wanted = tuple(positions)
    return tuple(make_needle(seed, n, p) for n in sorted(set(lengths)) for p in wanted)
