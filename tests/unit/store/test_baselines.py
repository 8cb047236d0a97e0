"""Named baselines in the store: saved once per name, found by name, refused where they were
recorded with another suite, model or servegate, and never from an unhealthy recording."""

from __future__ import annotations

import pytest
from sqlalchemy import Engine

from servegate.cli.gate_baseline import check_baseline_config
from servegate.config.loader import ConfigError
from servegate.config.models import EndpointConfig, GateConfig, Policy
from servegate.endpoints.errors import ErrorCategory, RequestError
from servegate.endpoints.types import Completion, Timing
from servegate.store.baselines import (
    StoredBaseline,
    baseline_refusal,
    delete_baseline,
    left_out,
    list_baselines,
    load_baseline,
    save_baseline,
    untrustworthy,
)
from servegate.store.writer import RunWriter, StoreError
from servegate.verdict.model import GateResult, Status

RECORDED = GateConfig(
    baseline=EndpointConfig(url="http://127.0.0.1:1/v1"),
    candidate=EndpointConfig(url="http://127.0.0.1:1/v1"),
    gates=("startup", "numerics", "golden"),
)
PRINTS = {"servegate": "0.3.0", "suite": "default v3 sha256:abc", "baseline.model": "m"}


def _baseline(engine: Engine, name: str = "v1") -> StoredBaseline:
    run_id = RunWriter.start(engine, baseline_url="http://127.0.0.1:1/v1",
                             candidate_url="http://127.0.0.1:1/v1", model="m",
                             config={}).run_id  # fmt: skip
    return StoredBaseline(name=name, run_id=run_id, created_at="2026-12-01T10:00:00+00:00",
                          endpoint_url="http://127.0.0.1:1/v1", model="m", fingerprints=PRINTS,
                          config=RECORDED.model_dump(mode="json"))  # fmt: skip


def test_a_baseline_is_saved_once_per_name_found_listed_and_deleted(engine: Engine) -> None:
    first = _baseline(engine)
    save_baseline(engine, first)
    assert load_baseline(engine, "v1") == first
    with pytest.raises(StoreError, match=r"^a baseline named 'v1' exists in .*: choose another "):
        save_baseline(engine, _baseline(engine))
    again = _baseline(engine)
    save_baseline(engine, again, replace=True)
    assert [b.run_id for b in list_baselines(engine)] == [again.run_id]
    delete_baseline(engine, "v1")
    assert list_baselines(engine) == []
    with pytest.raises(StoreError, match=r"^no baseline 'v1' in .* \(see `servegate baseline"):
        load_baseline(engine, "v1")


def test_a_recording_with_a_transport_failure_is_refused_and_what_is_not_truth_is_named(
    engine: Engine,
) -> None:

    def recording(*answers: Completion, again: tuple[Completion, ...] = ()) -> str:
        """A recording: `answers` on its baseline side, `again` on its candidate side (the same
        endpoint asked again), probe p0, p1, … in order on each."""
        writer = RunWriter.start(engine, baseline_url="b", candidate_url="b", model="m", config={})
        for side, given in (("baseline", answers), ("candidate", again)):
            for i, answer in enumerate(given):
                writer.record(gate="golden", probe=f"p{i}", side=side, api="chat", request={},
                              result=answer)  # fmt: skip
        writer.gate(GateResult(name="golden", status=Status.PASS, summary="ok"))
        return writer.run_id

    timing = Timing(sent_ns=1, done_ns=2)
    fine = Completion(status=200, content="4", timing=timing)
    rejected = RequestError(category=ErrorCategory.REJECTED, message="HTTP 400", status=400)
    timeout = RequestError(category=ErrorCategory.TIMEOUT, message="no answer in 60 s")
    cut = RequestError(category=ErrorCategory.TRUNCATED, message="stream closed without [DONE]")
    empty = Completion(status=200, content="", timing=timing)
    refused = Completion(status=400, error=rejected)
    assert untrustworthy(engine, recording(fine, refused)) is None
    # A timeout the endpoint gave on one side of its own A/A run only: a glitch, refused.
    glitch = recording(fine, Completion(status=None, error=timeout), again=(fine, fine))
    assert untrustworthy(engine, glitch) == (
        "the baseline's answer to golden/p1 failed (timeout) and the same request did not fail "
        "so when asked again in the recording"
    )
    # The same truncation on both sides (the reference engine's streamed tool calls) and an
    # empty answer (SmolLM2's to tools-single-auto) are the server's behaviour: recorded, named,
    # never given back as its answer (test_replay.py). A rejection is an answer.
    closed = Completion(status=200, error=cut, timing=timing)
    kept = recording(empty, fine, closed, refused, empty, again=(empty, fine, closed))
    assert untrustworthy(engine, kept) is None
    assert left_out(engine, kept) == ["golden/p0 (empty)", "golden/p2 (truncated)",
                                      "golden/p4 (empty)"]  # fmt: skip
    assert left_out(engine, recording(fine)) == []


def test_a_run_with_another_suite_model_or_servegate_is_refused(engine: Engine) -> None:
    stored = _baseline(engine)
    assert baseline_refusal(stored, {**PRINTS, "candidate.models": ["m"]}) is None
    assert baseline_refusal(stored, {**PRINTS, "suite": "default v4 sha256:def"}) == (
        "cannot compare with the stored baseline 'v1': it was recorded with another setting: "
        'suite was "default v3 sha256:abc", is now "default v4 sha256:def"; record it again'
    )


def test_a_run_asking_what_the_baseline_was_not_recorded_with_is_refused(engine: Engine) -> None:
    stored = _baseline(engine)
    live = RECORDED.model_copy(
        update={"candidate": EndpointConfig(url="http://127.0.0.1:2/v1"), "baseline_run": "v1",
                "request_deadline_s": 5.0, "strict": True, "gates": ("numerics", "performance")}
    )  # fmt: skip
    check_baseline_config(stored, live)  # servers, deadlines, strictness, a subset: allowed
    with pytest.raises(ConfigError) as refused:
        check_baseline_config(stored, live.model_copy(update={"gates": ("context",)}))
    assert str(refused.value) == (
        "cannot compare with the stored baseline 'v1': it was recorded without the context gate "
        "(recorded: startup, numerics, golden); choose --gates among them or record it again"
    )
    stricter = live.model_copy(update={"policy": Policy(noise_k=2.0)})
    with pytest.raises(ConfigError, match=r"another setting: policy was .*; give the same options"):
        check_baseline_config(stored, stricter)
