"""Sampled answers longer than one token: seeds, n > 1 and penalties (what is sent, and the
judgement on plain data).

- `seed`: the same seed twice (each isolated, and once streamed) must give the same text, and
  other seeds other texts, where the baseline does so; a baseline that never reproduces a seed
  (llama-cpp-python 0.3.16 reuses its KV prefix and its sampler's state) makes the check not
  applicable, never a regression of the candidate.
- `choices`: `n > 1` returns n choices indexed 0…n-1, streamed choices joined per index, and
  the choices of a sampled request differ, as the baseline's do; a baseline that answers one
  choice does not offer n > 1 (llama-cpp-python): not applicable.
- `penalties`: presence, frequency and repetition penalties make repeats rarer than each side's
  raw logprobs say, on the candidate as on the baseline (the repeat deficit: penalties.py).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from servegate.endpoints.types import Completion, RawResponse
from servegate.gates.evidence import curl, excerpt
from servegate.gates.sampling import penalties, production
from servegate.verdict.judgement import check, not_applicable, not_measured
from servegate.verdict.model import Check, Finding, Severity

SEED_PROMPT = "Write a short poem about the sea."
SEEDS = (11, 22, 33)
SEED_TOKENS = 16
CHOICES_PROMPT = "Name a city in Europe, then say why."
CHOICES_N = 4
CHOICES_TOKENS = 8


def chat(prompt: str, max_tokens: int, temperature: float, **extra: Any) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens,
            "temperature": temperature, **extra}  # fmt: skip


@dataclass(frozen=True)
class SequenceRequest:
    """One sequence-level request and how it is sent: `times` over, raw (n > 1: the typed
    client keeps one choice) or typed, isolated first (seeds) or not (penalties, concurrently)."""

    kind: str  # "seed", "choices", "penalty", "production"
    label: str
    body: Mapping[str, Any]
    times: int
    raw: bool = False
    isolate: bool = False


def sequence_requests(
    seeds: Sequence[int],
    choices_requests: int,
    penalty_draws: int,
    neutral: Mapping[str, Any],
    production_repeats: int = 0,
) -> list[SequenceRequest]:
    """What the seed, n > 1 and penalty checks send, with a side's neutral sampler, and the
    production-settings probes (production.py: the settings users run, no neutral sampler)."""
    out: list[SequenceRequest] = []
    if production_repeats:
        for pid, prompt, checker in production.PROBES:
            times = production_repeats * (1 if checker else production.OPEN_FACTOR)
            out.append(SequenceRequest(production.KIND, pid, production.request(prompt), times))
    for seed in seeds:
        body = chat(SEED_PROMPT, SEED_TOKENS, 1.0, **{**neutral, "seed": seed})
        out.append(SequenceRequest("seed", f"seed {seed}", body, 2, isolate=True))
        out.append(SequenceRequest("seed", f"seed {seed} streamed", {**body, "stream": True}, 1,
                                   isolate=True))  # fmt: skip
    if choices_requests:
        body = chat(CHOICES_PROMPT, CHOICES_TOKENS, 1.0, **{**neutral, "n": CHOICES_N})
        out.append(SequenceRequest("choices", f"n {CHOICES_N}", body, choices_requests, raw=True))
        out.append(SequenceRequest("choices", f"n {CHOICES_N} streamed", {**body, "stream": True},
                                   1, raw=True))  # fmt: skip
    if penalty_draws:
        for label, extra in (("none", {}), *penalties.PENALTIES.items()):
            out.append(
                SequenceRequest("penalty", label, penalties.request(neutral, extra), penalty_draws)
            )
    return out


@dataclass(frozen=True)
class SequenceDraws:
    """One sequence-level request, several times on each side (`label` says which: "seed 11",
    "n 4 streamed", "presence" …); `raw` answers for n > 1, whose choices the typed client keeps
    one of."""

    kind: str  # "seed", "choices", "penalty"
    label: str
    request: Mapping[str, Any]
    baseline: tuple[Completion | RawResponse, ...]
    candidate: tuple[Completion | RawResponse, ...]

    def side(self, name: str) -> tuple[Completion | RawResponse, ...]:
        return self.baseline if name == "baseline" else self.candidate


# --- seeds -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class SeedReading:
    """What one side's seeded answers show."""

    reproduces: bool | None  # every seed's answers equal (None: an answer failed)
    distinct: int  # different texts across seeds
    detail: str


def read_seeds(draws: Sequence[SequenceDraws], side: str) -> SeedReading:
    """Per seed, its answers (asked twice and streamed once) as a set of texts."""
    texts: dict[str, set[str]] = {}
    for d in draws:
        answers = d.side(side)
        if not answers or not all(isinstance(a, Completion) and a.ok for a in answers):
            return SeedReading(None, 0, f"{d.label}: an answer failed")
        seed = str(d.request.get("seed"))
        texts.setdefault(seed, set()).update(a.text for a in answers if isinstance(a, Completion))
    same = [label for label, seen in texts.items() if len(seen) == 1]
    firsts = {next(iter(sorted(seen))) for seen in texts.values()}
    detail = f"{len(same)} of {len(texts)} seeds reproduce; {len(firsts)} distinct text(s)"
    return SeedReading(len(same) == len(texts), len(firsts), detail)


# --- n > 1 -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ChoicesReading:
    """One side's answers to `n > 1`: per answer, its choice texts by index."""

    answers: tuple[dict[int, str], ...]
    errors: tuple[str, ...]
    n: int
    refused: int = 0  # answers the server gave as an HTTP 4xx: it refused the request itself

    @property
    def offered(self) -> bool:
        return any(len(a) > 1 for a in self.answers)

    @property
    def complete(self) -> bool:
        """Every answer has the n indexes 0…n-1."""
        return bool(self.answers) and all(set(a) == set(range(self.n)) for a in self.answers)

    @property
    def distinct(self) -> bool:
        """Some answer's choices differ (a sampled request's n choices repeat only by chance)."""
        return any(len(set(a.values())) > 1 for a in self.answers)

    @property
    def text(self) -> str:
        if not self.answers:
            return "; ".join(self.errors) or "no answer"
        counts = sorted({len(a) for a in self.answers})
        shown = "/".join(map(str, counts))
        kinds = max(len(set(a.values())) for a in self.answers)
        return f"{shown} choice(s) for n {self.n}, at most {kinds} different"


def _choices_of(raw: RawResponse) -> dict[int, str] | str:
    """Choice texts by index from a non-streamed or streamed (SSE) answer, or why not."""
    if not raw.ok:
        return f"HTTP {raw.status}" if raw.error is None else str(raw.error.category)
    body = raw.body.decode("utf-8", "replace")
    payloads: list[Any] = []
    if body.lstrip().startswith("{"):
        payloads = [json.loads(body)]
    else:
        for line in body.splitlines():
            if line.startswith("data:") and line[5:].strip() not in ("", "[DONE]"):
                payloads.append(json.loads(line[5:]))
    out: dict[int, str] = {}
    for payload in payloads:
        for choice in payload.get("choices") or []:
            index = int(choice.get("index", 0))
            part = (choice.get("message") or choice.get("delta") or {}).get("content")
            part = part if isinstance(part, str) else choice.get("text") or ""
            out[index] = out.get(index, "") + part
    return out


def read_choices(draws: Sequence[SequenceDraws], side: str, n: int) -> ChoicesReading:
    answers: list[dict[int, str]] = []
    errors: list[str] = []
    refused = 0
    for d in draws:
        for raw in d.side(side):
            if not isinstance(raw, RawResponse):
                continue
            refused += raw.error is None and raw.status is not None and 400 <= raw.status < 500
            try:
                got = _choices_of(raw)
            except (ValueError, AttributeError) as exc:  # not JSON, or not the expected shape
                got = f"unreadable answer: {exc}"
            if isinstance(got, str):
                errors.append(f"{d.label}: {got}")
            else:
                answers.append(got)
    return ChoicesReading(tuple(answers), tuple(errors), n, refused)


# --- the checks ------------------------------------------------------------------------------

Judged = tuple[Check, list[Finding]]
SIDES = ("baseline", "candidate")


def _finding(name: str, draws: SequenceDraws, url: str, message: str, b: str, c: str) -> Finding:
    return Finding(probe=f"{draws.kind}:{draws.label}", category=f"sampling_{name}",
                   severity=Severity.MAJOR, side="candidate", message=message,
                   baseline_excerpt=b, candidate_excerpt=c,
                   curl=curl(url, "chat", draws.request))  # fmt: skip


def _texts(draws: SequenceDraws, side: str) -> list[str]:
    return [a.text for a in draws.side(side) if isinstance(a, Completion)]


def seed_check(draws: Sequence[SequenceDraws], url: str) -> Judged:
    """The same seed reproduces on the candidate where it does on the baseline."""
    name, title = "seed", "the same seed gives the same text, another seed another"
    if not draws:
        return not_applicable(name, title, "no seed was asked (plan.seeds is empty)"), []
    b, c = read_seeds(draws, "baseline"), read_seeds(draws, "candidate")
    if b.reproduces is None:
        return not_measured(name, title, f"baseline: {b.detail}"), []
    if not b.reproduces:
        why = (
            f"the baseline does not reproduce a seed ({b.detail}): nothing to hold the candidate to"
        )
        return not_applicable(name, title, why), []
    if b.distinct < 2:
        why = f"the baseline gives one text for every seed ({b.detail}): it does not sample"
        return not_applicable(name, title, why), []
    if c.reproduces is None:
        return not_measured(name, title, f"candidate: {c.detail}"), []
    failed = not c.reproduces or c.distinct < 2
    reason = ""
    findings = []
    if failed:
        reason = "the seed is ignored: " if not c.reproduces else "every seed gives one text: "
        reason += f"{c.detail} where the baseline's {b.detail}"
        worst = next((d for d in draws if len(set(_texts(d, "candidate"))) > 1), draws[0])
        shown = {side: " | ".join(excerpt(t, 60) for t in _texts(worst, side)) for side in SIDES}
        message = f"{title}: {reason}"
        findings.append(_finding(name, worst, url, message, shown["baseline"], shown["candidate"]))
    return check(name, title, failed=failed, candidate=c.detail, baseline=b.detail,
                 limit="as the baseline: each seed reproduces, seeds differ",
                 reason=reason), findings  # fmt: skip


def choices_check(draws: Sequence[SequenceDraws], url: str) -> Judged:
    """`n > 1`: n choices indexed 0…n-1, streamed too, and different, as on the baseline."""
    name, title = "choices", f"n {CHOICES_N} gives {CHOICES_N} different choices, streamed too"
    if not draws:
        return not_applicable(name, title, "n > 1 was not asked (plan.choices_requests is 0)"), []
    b, c = read_choices(draws, "baseline", CHOICES_N), read_choices(draws, "candidate", CHOICES_N)
    if not b.offered:
        why = f"the baseline does not offer n > 1: {b.text}"
        return not_applicable(name, title, why), []
    if not b.complete or not b.distinct:
        return not_measured(name, title, f"the baseline's own choices: {b.text}"), []
    if not c.answers and not c.refused:  # transport errors, timeouts: nothing was answered
        return not_measured(name, title, f"candidate: {c.text}"), []
    # A candidate that refuses n > 1 (HTTP 4xx) where the baseline served it has lost the
    # feature: a regression, never "not measured" (vLLM refuses n > 1 at temperature 0, so a
    # candidate that serves sampled requests greedily shows here too).
    failed = not c.answers or not c.complete or not c.distinct
    reason = f"{c.text} where the baseline gives {b.text}" if failed else ""
    findings = (
        [_finding(name, draws[0], url, f"{title}: {reason}", b.text, c.text)] if failed else []
    )
    return check(name, title, failed=failed, candidate=c.text, baseline=b.text,
                 limit=f"{CHOICES_N} choices 0…{CHOICES_N - 1}, not all alike",
                 reason=reason), findings  # fmt: skip


def penalty_checks(draws: Sequence[SequenceDraws], url: str, alpha: float) -> list[Judged]:
    """Each penalty's repeat deficit (penalties.py) on both sides; the penalties are one family
    (Bonferroni), the draws without a penalty the instrument's control."""
    by_label = {
        d.label: (
            [a for a in d.baseline if isinstance(a, Completion)],
            [a for a in d.candidate if isinstance(a, Completion)],
        )
        for d in draws
    }
    read = penalties.readings(by_label)
    control = read.get("none")
    tested = [d for d in draws if d.label != "none"]
    level = alpha / max(1, len(tested))
    out: list[Judged] = []
    for d in tested:
        name = f"{d.label}_penalty"
        title = f"the {d.label} penalty makes repeats rarer than the raw report, as on the baseline"
        failed, b, c, limit, reason = penalties.judge(read[d.label], control, d.label, level)
        if failed is None:
            out.append((not_measured(name, title, reason), []))
            continue
        findings = [_finding(name, d, url, f"{title}: {reason}", b, c)] if failed else []
        judged = check(name, title, failed=failed, candidate=c, baseline=b, limit=limit,
                       policy_key="sampling.alpha", reason=reason)  # fmt: skip
        out.append((judged, findings))
    return out
