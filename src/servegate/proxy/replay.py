"""The offline shadow: captured requests (the proxy's `--capture` file, or one OpenAI request
body per line) sent to a baseline and a candidate and compared with the proxy's comparisons.

The whole file is read and checked before the first request goes out, so a broken line stops
the replay with nothing sent and nothing written.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from servegate.config.policy import SamplingPolicy
from servegate.proxy.comparison import PairComparison, compare_pair
from servegate.proxy.exchange import CHAT_PATH, COMPLETIONS_PATH, EMBEDDINGS_PATH, Exchange
from servegate.proxy.sampled import SampledPair, sampled_checks
from servegate.proxy.settings import Upstream
from servegate.verdict.judgement import check, gate_result
from servegate.verdict.model import Check, Outcome
from servegate.verdict.rules import decide


class TrafficFileError(ValueError):
    """A traffic file that cannot be replayed; the message names the file and the line."""


@dataclass(frozen=True)
class Captured:
    """One request to replay."""

    line: int
    path: str
    body: Mapping[str, Any]


def _path_of(body: Mapping[str, Any]) -> str | None:
    if "messages" in body:
        return CHAT_PATH
    if "prompt" in body:
        return COMPLETIONS_PATH
    if "input" in body:
        return EMBEDDINGS_PATH
    return None


def parse_traffic(path: Path) -> list[Captured]:
    """Every request in the file; TrafficFileError names the first bad line."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TrafficFileError(f"cannot read traffic file {path}: {exc}") from None
    found: list[Captured] = []
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except ValueError as exc:
            raise TrafficFileError(f"{path}:{number}: not JSON ({exc})") from None
        if not isinstance(value, dict):
            raise TrafficFileError(f"{path}:{number}: not a JSON object")
        if "request" in value and "path" in value:  # a line of `servegate proxy --capture`
            body, where = value["request"], value.get("path")
            if not isinstance(body, dict):
                raise TrafficFileError(f"{path}:{number}: the captured request is not an object")
        else:
            body, where = value, None
        where = where if isinstance(where, str) else _path_of(body)
        if where not in (CHAT_PATH, COMPLETIONS_PATH, EMBEDDINGS_PATH):
            raise TrafficFileError(
                f"{path}:{number}: not a chat, completions or embeddings request "
                "(no messages, prompt or input, and no known path)"
            )
        found.append(Captured(line=number, path=where, body=body))
    if not found:
        raise TrafficFileError(f"{path}: no requests in the file")
    return found


async def _ask(
    session: aiohttp.ClientSession,
    upstream: Upstream,
    captured: Captured,
    key: str | None,
    timeout_s: float,
) -> Exchange:
    headers = {"content-type": "application/json"}
    if key:
        headers["authorization"] = f"Bearer {key}"
    exchange = Exchange(sent_ns=time.perf_counter_ns())
    try:
        async with session.post(
            upstream.url(captured.path.encode(), b""),
            data=json.dumps(captured.body).encode(),
            headers=headers,
            timeout=aiohttp.ClientTimeout(total=timeout_s),
            allow_redirects=False,
        ) as response:
            exchange.status = response.status
            exchange.headers = {k.lower(): v for k, v in response.headers.items()}
            async for data in response.content.iter_any():
                exchange.keep(data, time.perf_counter_ns(), 16 * 1024 * 1024)
    except TimeoutError:
        exchange.error, exchange.timed_out = "no answer in time", True
    except aiohttp.ClientError as exc:
        exchange.error = f"{type(exc).__name__}: {exc}"
    exchange.done_ns = time.perf_counter_ns()
    return exchange


@dataclass(frozen=True)
class ReplayedPair:
    captured: Captured
    baseline: Exchange
    candidate: Exchange
    comparison: PairComparison


async def replay(
    traffic: Sequence[Captured],
    baseline: Upstream,
    candidate: Upstream,
    *,
    baseline_key: str | None = None,
    candidate_key: str | None = None,
    concurrency: int = 1,
    timeout_s: float = 120.0,
) -> list[ReplayedPair]:
    """Send each request to both sides (the two at once) and compare the answers, in file order."""
    gate = asyncio.Semaphore(concurrency)

    async def one(session: aiohttp.ClientSession, captured: Captured) -> ReplayedPair:
        async with gate:
            a, b = await asyncio.gather(
                _ask(session, baseline, captured, baseline_key, timeout_s),
                _ask(session, candidate, captured, candidate_key, timeout_s),
            )
        return ReplayedPair(captured, a, b, compare_pair(captured.path, captured.body, a, b))

    async with aiohttp.ClientSession(trust_env=False) as session:
        return list(await asyncio.gather(*(one(session, c) for c in traffic)))


@dataclass(frozen=True)
class ReplaySummary:
    """Counts over the replayed pairs and the verdict they give (see `judge`)."""

    pairs: int
    both_answered: int
    greedy_pairs: int
    sampled_pairs: int  # judged as distributions (proxy/sampled.py), never pair by pair
    exact_matches: int
    baseline_errors: int
    candidate_errors: int  # failed where the baseline answered
    candidate_degenerate: int
    json_regressions: int  # the candidate's JSON does not parse where the baseline's does
    tool_call_regressions: int
    verdict: str  # pass | fail | inconclusive (verdict.rules.decide)
    exit_code: int  # the verdict's exit code (0 pass, 1 fail, 3 inconclusive)
    reasons: tuple[str, ...]
    checks: tuple[Check, ...] = ()  # every check with its evidence, power and policy key

    def as_dict(self) -> dict[str, Any]:
        out = {k: getattr(self, k) for k in self.__dataclass_fields__}
        out["checks"] = [c.model_dump(mode="json") for c in self.checks]
        return out


def _regressed(name: str, c: PairComparison) -> bool:
    return c.primary_metrics.get(name) == 0.0 and c.candidate_metrics.get(name) == 1.0


# What a replayed pair can show against the baseline, as checks of the gates' one rule.
_REGRESSIONS = {
    "candidate_errors": "the candidate fails a request the baseline answered",
    "candidate_degenerate": "a temperature-0 answer of the candidate is degenerate where the "
    "baseline's is not",
    "json_regressions": "the candidate's JSON does not parse where the baseline's does",
    "tool_call_regressions": "the candidate's tool-call arguments do not parse where the "
    "baseline's do",
}


def judge(pairs: Sequence[ReplayedPair], policy: SamplingPolicy | None = None) -> ReplaySummary:
    """Fail on what the gates call a regression: the candidate fails a request the baseline
    answered (any pair); on temperature-0 pairs, answer by answer, degenerate output and JSON or
    tool-call arguments that stop parsing where the baseline's did not; on sampled pairs, where
    either answer may be bad by chance, the same as distributions (proxy/sampled.py, at
    `policy`'s level). Inconclusive when no pair was answered by the baseline. Each is a check,
    and the run-level rule is the gates' own (`verdict.rules.decide`). Exact-match rate is
    reported, not judged: a replay has no noise floor to judge drift against."""
    comps = [p.comparison for p in pairs]
    greedy = [c for c in comps if c.greedy]
    sampled = [
        SampledPair.of(p.captured.body, p.comparison)
        for p in pairs
        if not p.comparison.greedy and p.captured.path != EMBEDDINGS_PATH
    ]
    both = sum(1 for c in comps if c.primary_ok and c.candidate_ok)
    counts = {
        "baseline_errors": sum(1 for c in comps if not c.primary_ok),
        "candidate_errors": sum(1 for c in comps if c.primary_ok and not c.candidate_ok),
        "candidate_degenerate": sum(1 for c in greedy if c.candidate_degenerate),
        "json_regressions": sum(1 for c in greedy if _regressed("json_parse_failure", c)),
        "tool_call_regressions": sum(1 for c in greedy if _regressed("tool_call_parse_failure", c)),
    }
    answered = sum(1 for c in comps if c.primary_ok)
    checks = [
        check("baseline_answered", "the baseline answered the replayed requests",
              failed=None if not answered else False, core=True,
              candidate=f"{answered}/{len(comps)}",
              reason="" if answered else "the baseline answered none of the requests"),
        *(check(name, title, failed=counts[name] > 0, candidate=str(counts[name]),
                limit="0", reason=f"{name.replace('_', ' ')}: {counts[name]}")
          for name, title in _REGRESSIONS.items()),
        *(sampled_checks(sampled, policy or SamplingPolicy()) if sampled else ()),
    ]  # fmt: skip
    verdict = decide([gate_result("replay", checks)])
    if not answered:
        reasons: tuple[str, ...] = ("the baseline answered none of the requests",)
    else:
        reasons = tuple(c.reason for c in checks[1:] if c.outcome is Outcome.FAIL)
    return ReplaySummary(
        pairs=len(comps),
        both_answered=both,
        greedy_pairs=sum(1 for c in comps if c.exact_match is not None),
        sampled_pairs=len(sampled),
        exact_matches=sum(1 for c in comps if c.exact_match),
        verdict=verdict.status.value,
        exit_code=verdict.exit_code,
        reasons=reasons,
        checks=tuple(checks),
        **counts,
    )
