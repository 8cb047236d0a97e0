"""A stored side answers again: exactly what it recorded, in the order it was asked, and never an
error or an unasked request presented as an answer."""

from __future__ import annotations

import time

from sqlalchemy import Engine

from servegate.endpoints.errors import ErrorCategory, RequestError
from servegate.endpoints.types import (
    Completion,
    Embeddings,
    RawResponse,
    Timing,
    TokenLogprob,
    ToolCall,
    Usage,
)
from servegate.store.baselines import recorded_answers
from servegate.store.replay import StoredEndpoint
from servegate.store.writer import RunWriter
from servegate.verdict.model import GateResult, Status

BODY = {"messages": [{"role": "user", "content": "What is 2+2?"}], "max_tokens": 8}
T0 = 1_000_000_000

FULL = Completion(
    status=200,
    content="4",
    tool_calls=(ToolCall(index=0, id="c1", name="add", arguments='{"a": 2}'),),
    finish_reason="stop",
    usage=Usage(prompt_tokens=9, completion_tokens=1, total_tokens=10),
    logprobs=(TokenLogprob("4", -0.01, (("4", -0.01), ("5", -4.5))),),
    prompt_logprobs=(None, TokenLogprob("What", -3.25)),
    model="m",
    timing=Timing(
        sent_ns=T0,
        headers_ns=T0 + 5_000_000,
        done_ns=T0 + 40_000_000,
        token_chunk_ns=(T0 + 20_000_000, T0 + 30_000_000),
        token_chunk_tokens=(1, 1),
        queued_ns=T0 - 1_000_000,
    ),
    flags=("buffered_stream",),
    attempts=2,
    waited_s=0.5,
)


def _stored(store: Engine, *answers: tuple[str, dict[str, object], object]) -> StoredEndpoint:
    writer = RunWriter.start(
        store, baseline_url="http://b/v1", candidate_url="http://c/v1", model="m", config={}
    )
    for api, body, result in answers:
        writer.record(
            gate="golden", probe="p", side="baseline", api=api, request=body, result=result
        )  # type: ignore[arg-type]
    writer.gate(GateResult(name="golden", status=Status.PASS, summary="ok"))
    return StoredEndpoint(
        name="baseline",
        base_url="http://b/v1",
        source="the stored baseline 'v1'",
        models=("m",),
        rows=recorded_answers(store, writer.run_id),
    )


async def test_a_recorded_completion_comes_back_field_for_field_with_its_timing_moved_to_now(
    engine: Engine,
) -> None:
    endpoint = _stored(engine, ("chat", BODY, FULL))
    before = time.perf_counter_ns()
    # The same body with its keys in another order is the same request.
    got = await endpoint.chat(dict(reversed(list(BODY.items()))))
    assert got.timing.sent_ns >= before
    assert (got.timing.ttft_ms, got.timing.e2el_ms) == (FULL.timing.ttft_ms, FULL.timing.e2el_ms)
    assert got.timing.queued_ns is not None
    assert got.timing.sent_ns - got.timing.queued_ns == 1_000_000
    assert got.timing.token_chunk_tokens == (1, 1)
    same_but_timing = Completion(
        **{**{f: getattr(got, f) for f in got.__slots__}, "timing": FULL.timing}
    )
    assert same_but_timing == FULL


async def test_a_body_asked_twice_gets_each_recorded_answer_in_turn_then_none(
    engine: Engine,
) -> None:
    first = Completion(status=200, content="first", timing=Timing(sent_ns=T0, done_ns=T0 + 1))
    second = Completion(status=200, content="second", timing=Timing(sent_ns=T0, done_ns=T0 + 1))
    endpoint = _stored(engine, ("completions", BODY, first), ("completions", BODY, second))
    assert (await endpoint.completion(BODY)).content == "first"
    assert (await endpoint.completion(BODY)).content == "second"
    third = await endpoint.completion(BODY)
    assert third.error is not None
    assert third.error.category is ErrorCategory.NOT_SENT
    assert third.error.message == (
        "the stored baseline 'v1' has no answer to this completions request (the recording "
        "never sent it); not measured"
    )
    # Another API with the same body is another request.
    assert (await endpoint.chat(BODY)).error is not None


async def test_an_error_answer_is_never_given_back_as_truth_but_a_rejection_is(
    engine: Engine,
) -> None:
    def failed(category: ErrorCategory, status: int) -> Completion:
        error = RequestError(category=category, message=f"HTTP {status}", status=status)
        return Completion(status=status, error=error, timing=Timing(sent_ns=T0, done_ns=T0 + 1))

    rejected, crashed = {"prompt": "too long"}, {"prompt": "json_schema"}
    endpoint = _stored(
        engine,
        ("completions", rejected, failed(ErrorCategory.REJECTED, 400)),
        ("completions", crashed, failed(ErrorCategory.SERVER, 500)),
    )
    kept = await endpoint.completion(rejected)
    assert kept.error is not None
    assert (kept.status, kept.error.category) == (400, ErrorCategory.REJECTED)
    refused = await endpoint.completion(crashed)
    assert refused.error is not None
    assert refused.status is None
    assert refused.error.category is ErrorCategory.NOT_SENT
    assert "answered this completions request with an error (server)" in refused.error.message


async def test_an_empty_answer_is_never_given_back_as_truth_but_reasoning_alone_is(
    engine: Engine,
) -> None:
    # FAULTS 44. The empty one is SmolLM2's own answer to the tool probe tools-single-auto (9
    # tokens that parse to neither text nor a tool call); a reasoning model cut off by
    # max_tokens answers reasoning alone, which is an answer.
    timing = Timing(sent_ns=T0, done_ns=T0 + 1)
    usage = Usage(prompt_tokens=30, completion_tokens=9, total_tokens=39)
    empty = Completion(status=200, content="", finish_reason="stop", timing=timing, usage=usage)
    thinking = Completion(status=200, content=None, reasoning="Paris is", finish_reason="length",
                          timing=timing)  # fmt: skip
    tools, think = {"prompt": "weather"}, {"prompt": "think"}
    endpoint = _stored(engine, ("chat", tools, empty), ("chat", think, thinking))
    refused = await endpoint.chat(tools)
    assert refused.error is not None
    assert (refused.status, refused.error.category) == (None, ErrorCategory.NOT_SENT)
    assert refused.error.message == (
        "the stored baseline 'v1' answered this chat request with an empty completion "
        "(finish_reason stop), which is never used as its answer; not measured"
    )
    assert (await endpoint.chat(think)).reasoning == "Paris is"


async def test_an_embeddings_error_comes_back_as_it_came(engine: Engine) -> None:
    # The embeddings gate reads it as what the server serves (the generative reference engine
    # fails a batch with HTTP 500 and answers one input with per-token vectors: not applicable)
    # and never compares vectors with it; as not_sent, a stored baseline of that engine left the
    # gate not measured (core) and every candidate inconclusive (measured 2026-12-06).
    error = RequestError(category=ErrorCategory.SERVER, message="llama_decode returned -1",
                         status=500)  # fmt: skip
    failed = Embeddings(status=500, error=error, timing=Timing(sent_ns=T0, done_ns=T0 + 1))
    endpoint = _stored(engine, ("embeddings", {"input": ["a", "b"]}, failed))
    got = await endpoint.embeddings({"input": ["a", "b"]})
    assert (got.status, got.error) == (500, error)


async def test_embeddings_and_raw_exchanges_come_back_and_models_are_listed(
    engine: Engine,
) -> None:
    vectors = Embeddings(
        status=200,
        vectors=((0.5, -0.25),),
        usage=Usage(prompt_tokens=2),
        timing=Timing(sent_ns=T0, done_ns=T0 + 1),
        model="m",
    )
    version = RawResponse(
        status=200,
        headers={"content-type": "application/json"},
        body=b'{"version": "1.2"}',
        timing=Timing(sent_ns=T0),
    )
    endpoint = _stored(
        engine,
        ("embeddings", {"input": "hi"}, vectors),
        ("GET ../version", {}, version),
    )
    got = await endpoint.embeddings({"input": "hi"})
    assert (got.vectors, got.usage, got.model) == (vectors.vectors, vectors.usage, "m")
    raw = await endpoint.raw("GET", "../version")
    assert (raw.status, raw.json()) == (200, {"version": "1.2"})
    # The preflight listing is never recorded: it is answered from the recording's fingerprint.
    listing = await endpoint.raw("GET", "/models")
    assert listing.json()["data"] == [{"id": "m", "object": "model"}]
    missing = await endpoint.raw("GET", "/metrics")
    assert missing.error is not None
    assert missing.error.category is ErrorCategory.NOT_SENT
