"""The golden gate's Responses API check on plain data built from vLLM 0.32.0's real answers."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from servegate.endpoints.errors import ErrorCategory, RequestError
from servegate.endpoints.responses import ResponsesAnswer, parse_response, parse_stream
from servegate.endpoints.types import Completion, Usage
from servegate.gates.golden.responses import (
    ResponsesEvidence,
    ResponsesObservation,
    evaluate_responses,
)
from servegate.verdict.model import Outcome

DATA = Path(__file__).resolve().parents[3] / "data" / "vllm"
TEXT = "L'Étoile, la Marseillaise, la femme,"
CHAT = Completion(status=200, content=TEXT, usage=Usage(37, 16, 53))
ANSWER = parse_response(json.loads((DATA / "responses.json").read_text())["response"])
STREAM = parse_stream((DATA / "responses-stream.sse").read_bytes())
NOT_FOUND = ResponsesAnswer(
    Completion(status=404, error=RequestError(ErrorCategory.REJECTED, "HTTP 404", status=404))
)
PROMPT = "What is the capital of France?"


def _obs(chat: Completion = CHAT, answer: ResponsesAnswer = ANSWER,
         stream: ResponsesAnswer = STREAM) -> ResponsesObservation:  # fmt: skip
    return ResponsesObservation(PROMPT, chat, answer, stream)


def _judge(b: ResponsesObservation, c: ResponsesObservation) -> tuple[Outcome, list[str]]:
    checks, findings = evaluate_responses(ResponsesEvidence((b,), (c,)))
    return checks[0].outcome, [f.category for f in findings if f.blocking]


def test_the_real_answers_hold_parity_and_an_unchanged_candidate_passes() -> None:
    assert _obs().parity_breaks() == []
    assert _judge(_obs(), _obs()) == (Outcome.PASS, [])


def test_a_baseline_without_the_route_leaves_the_check_not_applicable() -> None:
    checks, findings = evaluate_responses(ResponsesEvidence((_obs(answer=NOT_FOUND),), ()))
    assert (checks[0].outcome, findings) == (Outcome.NOT_APPLICABLE, [])
    assert "HTTP 404" in checks[0].reason


def test_a_lost_route_a_parity_break_and_a_changed_answer_each_fail() -> None:
    assert _judge(_obs(), _obs(answer=NOT_FOUND)) == (Outcome.FAIL, ["responses_lost"])
    other = replace(ANSWER, completion=replace(ANSWER.completion, content="Paris"))
    # Chat says TEXT on both sides; only the candidate's Responses answer moved.
    assert _judge(_obs(), _obs(answer=other)) == (
        Outcome.FAIL,
        ["responses_parity", "responses_regression"],
    )
    broken = replace(STREAM, completion=replace(STREAM.completion, error=RequestError(
        ErrorCategory.TRUNCATED, "no terminal event")))  # fmt: skip
    assert _judge(_obs(), _obs(stream=broken)) == (Outcome.FAIL, ["responses_parity"])


def test_a_break_the_baseline_shows_too_does_not_block() -> None:
    differs = replace(CHAT, content="Paris")  # chat and Responses disagree on both sides
    assert _judge(_obs(chat=differs), _obs(chat=differs)) == (Outcome.PASS, [])
