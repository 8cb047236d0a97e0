"""Checks on the text of a completion: exact and partial matches, length, script, refusal,
degeneration and agreement with the baseline."""

from __future__ import annotations

import json
import re
import unicodedata

from servegate.endpoints.answers import AnswerClass, content_problems
from servegate.endpoints.json_text import parse_json
from servegate.endpoints.text import quoted
from servegate.endpoints.types import Completion
from servegate.probes import assertions as a
from servegate.probes.outcome import AssertionOutcome
from servegate.probes.script import LANGUAGE_SCRIPTS, MARKER_WORDS, marker_words, script_shares

REFUSAL_PHRASES = (
    "i can't",
    "i cannot",
    "i can not",
    "i won't",
    "i will not",
    "i'm sorry",
    "i am sorry",
    "i apologize",
    "i'm unable",
    "i am unable",
    "i'm not able",
    "i am not able",
    "cannot help with",
    "can't help with",
    "cannot assist",
    "can't assist",
    "cannot provide",
    "can't provide",
    "not able to help",
    "i must decline",
    "as an ai",
)


def _fold(text: str, ignore_case: bool) -> str:
    return text.casefold() if ignore_case else text


def equals(x: a.Equals, c: Completion, b: Completion | None) -> AssertionOutcome:
    got = c.text.strip() if x.strip else c.text
    ok = _fold(got, x.ignore_case) == _fold(x.value, x.ignore_case)
    return AssertionOutcome(x.type, ok, f"expected {x.value!r}, got {quoted(c.content)}")


def contains(x: a.Contains, c: Completion, b: Completion | None) -> AssertionOutcome:
    ok = _fold(x.value, x.ignore_case) in _fold(c.text, x.ignore_case)
    return AssertionOutcome(x.type, ok, f"{x.value!r} {'' if ok else 'not '}in {quoted(c.content)}")


def not_contains(x: a.NotContains, c: Completion, b: Completion | None) -> AssertionOutcome:
    found = _fold(x.value, x.ignore_case) in _fold(c.text, x.ignore_case)
    return AssertionOutcome(
        x.type, not found, f"{x.value!r} {'' if found else 'not '}in {quoted(c.content)}"
    )


def regex(x: a.Regex, c: Completion, b: Completion | None) -> AssertionOutcome:
    flags = re.IGNORECASE if x.ignore_case else 0
    match = (re.fullmatch if x.full else re.search)(x.pattern, c.text.strip(), flags)
    verb = "matches" if match else "does not match"
    return AssertionOutcome(x.type, match is not None, f"{quoted(c.content)} {verb} /{x.pattern}/")


def max_length(x: a.MaxLength, c: Completion, b: Completion | None) -> AssertionOutcome:
    n = len(c.text)
    return AssertionOutcome(x.type, n <= x.chars, f"{n} characters, at most {x.chars} allowed")


def min_length(x: a.MinLength, c: Completion, b: Completion | None) -> AssertionOutcome:
    n = len(c.text)
    return AssertionOutcome(x.type, n >= x.chars, f"{n} characters, at least {x.chars} needed")


def _share_message(total: int, shares: dict[str, float]) -> str:
    if not total:
        return "no letters in the content"
    top = sorted(shares.items(), key=lambda kv: -kv[1])[:3]
    return ", ".join(f"{name} {share:.0%}" for name, share in top) + f" of {total} letters"


def script(x: a.Script, c: Completion, b: Completion | None) -> AssertionOutcome:
    total, shares = script_shares(c.text)
    share = shares.get(x.script, 0.0)
    ok = total > 0 and share >= x.min_share
    return AssertionOutcome(
        x.type,
        ok,
        f"{x.script} {share:.0%} (need {x.min_share:.0%}): {_share_message(total, shares)}",
    )


def language(x: a.Language, c: Completion, b: Completion | None) -> AssertionOutcome:
    total, shares = script_shares(c.text)
    scripts = LANGUAGE_SCRIPTS[x.language]
    share = sum(shares.get(s, 0.0) for s in scripts)
    problems = []
    if total == 0 or share < x.min_share:
        problems.append(f"{'+'.join(scripts)} is {share:.0%} of letters, need {x.min_share:.0%}")
    if x.language == "ja" and shares.get("kana", 0.0) == 0.0 and total:
        problems.append("no kana, so not Japanese")
    if x.language in MARKER_WORDS and not marker_words(c.text, x.language):
        problems.append(f"no common {x.language} word")
    detail = _share_message(total, shares)
    if problems:
        return AssertionOutcome(
            x.type, False, f"not {x.language}: {'; '.join(problems)} ({detail})"
        )
    return AssertionOutcome(x.type, True, f"{x.language}: {detail}")


def _refusal_phrase(text: str, phrases: tuple[str, ...] | None) -> str | None:
    folded = text.casefold().replace("’", "'")
    for phrase in phrases or REFUSAL_PHRASES:
        if phrase.casefold() in folded:
            return phrase
    return None


def refusal(x: a.Refusal, c: Completion, b: Completion | None) -> AssertionOutcome:
    phrase = _refusal_phrase(c.text, x.phrases)
    msg = f"refused ({phrase!r})" if phrase else f"no refusal phrase in {quoted(c.content)}"
    return AssertionOutcome(x.type, phrase is not None, msg)


def no_refusal(x: a.NoRefusal, c: Completion, b: Completion | None) -> AssertionOutcome:
    phrase = _refusal_phrase(c.text, x.phrases)
    msg = f"refused ({phrase!r}): {quoted(c.content)}" if phrase else "answered without refusing"
    return AssertionOutcome(x.type, phrase is None, msg)


def no_degeneration(x: a.NoDegeneration, c: Completion, b: Completion | None) -> AssertionOutcome:
    found = dict(content_problems(text=c.text, tool_calls=len(c.tool_calls)))
    if AnswerClass.DEGENERATE in found:
        why = found[AnswerClass.DEGENERATE]
        return AssertionOutcome(x.type, False, f"{why}: {quoted(c.content)}")
    # Empty is a problem of the answer (the classifier's); whether it fails the probe is
    # relative: an empty answer where the baseline wrote text.
    if AnswerClass.EMPTY in found and not x.allow_empty:
        if b is None:
            return AssertionOutcome(x.type, False, "empty output")
        if b.text.strip():
            return AssertionOutcome(x.type, False, "empty output where the baseline had text")
    return AssertionOutcome(x.type, True, "no severe degeneration")


def normalise(text: str, ignore: tuple[a.Normalisation, ...]) -> str:
    """Apply the chosen normalisations: case folding, punctuation removal, whitespace collapse."""
    if "case" in ignore:
        text = text.casefold()
    if "punctuation" in ignore:
        text = "".join(ch for ch in text if not unicodedata.category(ch).startswith("P"))
    if "whitespace" in ignore:
        text = " ".join(text.split())
    return text


def _canonical_calls(c: Completion) -> list[str]:
    calls = []
    for call in c.tool_calls:
        value, error = parse_json(call.arguments)
        args = call.arguments if error is not None else json.dumps(value, sort_keys=True)
        calls.append(f"{call.name}({args})")
    return sorted(calls)


def matches_baseline(x: a.MatchesBaseline, c: Completion, b: Completion | None) -> AssertionOutcome:
    if b is None:
        return AssertionOutcome(x.type, True, "not judged: no baseline", applicable=False)
    if b.error is not None:
        why = f"not judged: the baseline request failed ({b.error.category})"
        return AssertionOutcome(x.type, True, why, applicable=False)
    if x.field == "tool_calls":
        got, want = _canonical_calls(c), _canonical_calls(b)
        return AssertionOutcome(x.type, got == want, f"tool calls {got!r}, baseline {want!r}")
    if not x.ignore:
        ok = c.content == b.content
    else:
        ok = normalise(c.text, x.ignore) == normalise(b.text, x.ignore)
    if ok:
        return AssertionOutcome(x.type, True, "same as the baseline")
    at = next(
        (i for i, (p, q) in enumerate(zip(c.text, b.text, strict=False)) if p != q),
        min(len(c.text), len(b.text)),
    )
    return AssertionOutcome(
        x.type,
        False,
        f"differs from the baseline at character {at}: {quoted(c.content)} vs {quoted(b.content)}",
    )
