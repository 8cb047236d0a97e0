import json
import os
import subprocess
import threading
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from servegate.config.models import Policy
from servegate.endpoints.errors import ErrorCategory, RequestError
from servegate.endpoints.types import Completion, Timing, ToolCall, Usage
from servegate.gates.context import ContextEvidence, ContextPlan, evaluate
from servegate.gates.context.judgement import judge
from servegate.gates.context.plan import Kind, StepObservation, full_grid, long_needle, steps
from servegate.gates.golden.probe import ProbeStatus
from servegate.probes.needles import make_needle
from servegate.verdict.model import Severity, Status

NEEDLE = make_needle(0, 500, "middle")
PLAN = ContextPlan()


def text(content: str | None, *, ttft_ms: float = 10.0, reasoning: str | None = None) -> Completion:
    timing = Timing(sent_ns=1, token_chunk_ns=(1 + int(ttft_ms * 1e6),), done_ns=2 * 10**9)
    return Completion(
        status=200, content=content, reasoning=reasoning, finish_reason="stop", timing=timing
    )


def failed(category: ErrorCategory, chunks: int = 0) -> Completion:
    timing = Timing(sent_ns=1, token_chunk_ns=tuple(range(2, 2 + chunks)))
    return Completion(status=200, error=RequestError(category, "deadline"), timing=timing)


def call(arguments: str, name: str = "get_weather", index: int = 0) -> Completion:
    return Completion(
        status=200, tool_calls=(ToolCall(index, "c1", name, arguments),), finish_reason="tool_calls"
    )


def obs(
    kind: Kind, baseline: Sequence[Completion], candidate: Sequence[Completion], probe: str = ""
) -> StepObservation:
    needle = NEEDLE if kind in (Kind.NEEDLE, Kind.PREFIX_CACHE) else None
    request = needle.request() if needle else {"messages": [{"role": "user", "content": "hi"}]}
    return StepObservation(
        probe or str(kind), kind, request, tuple(baseline), tuple(candidate), needle
    )


def run(
    *observations: StepObservation,
) -> tuple[Status, list[tuple[str, Severity]], ContextEvidence]:
    ev = ContextEvidence(observations, "http://b/v1", "http://c/v1", "m", PLAN)
    result = evaluate(ev, Policy())
    return result.status, [(f.category, f.severity) for f in result.findings], ev


FOUND, MISSED = text(f"It is {NEEDLE.code}."), text("I do not know.")
# A probe both sides pass: the gate then has one comparison that was measured.
COMPARED = obs(Kind.NEEDLE, [FOUND], [FOUND])


def test_a_needle_the_baseline_finds_and_the_candidate_misses_is_a_long_context_regression() -> (
    None
):
    o = obs(Kind.NEEDLE, [FOUND], [MISSED])
    status, findings, ev = run(o)
    assert status is Status.FAIL
    assert findings == [("long_context", Severity.MAJOR)]
    result = evaluate(ev, Policy())
    assert result.metrics["needle_recall_baseline"] == 1.0
    assert result.metrics["needle_recall_candidate"] == 0.0


def _replayed(command: str) -> dict[str, object]:
    """Run a printed reproducer with bash and curl against a loopback server (its URL put in
    place of the test's `http://c/v1`); the JSON body the server received."""
    received: list[bytes] = []

    class Capture(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            received.append(self.rfile.read(int(self.headers["Content-Length"])))
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, format: str, *args: object) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Capture)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/v1"
        done = subprocess.run(["bash", "-c", command.replace("http://c/v1", url)],
                              capture_output=True, text=True, timeout=30,
                              env={**os.environ, "OPENAI_API_KEY": "k"})  # fmt: skip
    finally:
        server.shutdown()
        server.server_close()
    assert done.returncode == 0, done.stderr
    [body] = received
    return dict(json.loads(body))


def test_the_needle_reproducer_sends_the_exact_request_body_as_printed() -> None:
    _, _, ev = run(obs(Kind.NEEDLE, [FOUND], [MISSED]))
    command = evaluate(ev, Policy()).findings[0].curl or ""
    assert command.startswith("curl -sS http://c/v1/chat/completions ")
    assert "servegate" not in command.split("<<")[0]  # nothing of servegate's is imported
    assert _replayed(command) == NEEDLE.request()


@pytest.mark.parametrize(
    ("baseline", "candidate", "expected"),
    [
        (FOUND, FOUND, ProbeStatus.PASS),
        (MISSED, MISSED, ProbeStatus.BASELINE_FAIL),
        (MISSED, FOUND, ProbeStatus.BASELINE_FAIL),
    ],
    ids=["both-find", "both-miss", "only-candidate-finds"],
)
def test_needle_ties_and_candidate_gains_never_block(
    baseline: Completion, candidate: Completion, expected: ProbeStatus
) -> None:
    o = obs(Kind.NEEDLE, [baseline], [candidate])
    assert judge(o, PLAN)[0] is expected
    status, findings, _ = run(o, COMPARED)
    assert status is Status.PASS
    assert findings == []


def test_a_gate_with_only_baseline_failures_measured_no_regression_and_is_inconclusive() -> None:
    status, _, _ = run(obs(Kind.NEEDLE, [MISSED], [FOUND]))
    assert status is Status.INCONCLUSIVE


def test_a_candidate_that_hangs_on_a_long_prompt_is_a_critical_hang_not_a_recall_loss() -> None:
    o = obs(Kind.NEEDLE, [FOUND], [failed(ErrorCategory.TIMEOUT)])
    assert judge(o, PLAN)[0] is ProbeStatus.INCONCLUSIVE  # the answer was never seen
    status, findings, _ = run(o)
    assert status is Status.FAIL
    assert findings == [("timeout", Severity.CRITICAL)]


def test_a_needle_not_sent_to_the_candidate_is_inconclusive_and_stated() -> None:
    o = obs(Kind.NEEDLE, [FOUND], [])
    assert judge(o, PLAN)[0] is ProbeStatus.INCONCLUSIVE
    status, findings, _ = run(o)
    assert status is Status.INCONCLUSIVE
    assert findings == [("long_context", Severity.INFO)]


def test_a_baseline_error_makes_the_probe_inconclusive_not_a_pass() -> None:
    o = obs(Kind.NEEDLE, [failed(ErrorCategory.SERVER)], [FOUND])
    assert judge(o, PLAN)[0] is ProbeStatus.INCONCLUSIVE


MISS = text("Answer A", ttft_ms=900)
HIT_SAME, HIT_OTHER = text("Answer A", ttft_ms=40), text("Answer B", ttft_ms=40)


def test_hit_differing_from_miss_on_both_sides_is_an_engine_property_reported_as_info() -> None:
    o = obs(Kind.PREFIX_CACHE, [MISS, HIT_OTHER], [MISS, HIT_OTHER])
    assert judge(o, PLAN)[0] is ProbeStatus.BASELINE_FAIL
    status, findings, ev = run(o, COMPARED)
    assert status is Status.PASS
    assert findings == [("prefix_cache", Severity.INFO)]
    assert "engine property" in evaluate(ev, Policy()).findings[0].message


def test_hit_differing_from_miss_only_on_the_candidate_fails_prefix_cache() -> None:
    status, findings, ev = run(obs(Kind.PREFIX_CACHE, [MISS, HIT_SAME], [MISS, HIT_OTHER]))
    assert status is Status.FAIL
    assert findings == [("prefix_cache", Severity.MAJOR)]
    assert _replayed(evaluate(ev, Policy()).findings[0].curl or "") == NEEDLE.request()


def test_a_cache_hit_without_proof_is_inconclusive() -> None:
    slow_hit = text("Answer A", ttft_ms=850)
    o = obs(Kind.PREFIX_CACHE, [MISS, slow_hit], [MISS, slow_hit])
    status, findings, ev = run(o)
    assert status is Status.INCONCLUSIVE
    assert findings == [("prefix_cache", Severity.INFO)]
    assert "not proven" in evaluate(ev, Policy()).findings[0].message


def test_cached_tokens_prove_the_hit_even_without_a_ttft_drop() -> None:
    hit = Completion(
        status=200, content="Answer A", usage=Usage(prompt_tokens=500, cached_tokens=480)
    )
    o = obs(Kind.PREFIX_CACHE, [MISS, hit], [MISS, hit])
    status, verdict_b, _ = judge(o, PLAN)
    assert status is ProbeStatus.PASS
    assert "cached_tokens=480" in verdict_b.why


def test_streamed_text_that_differs_only_on_the_candidate_fails_stream_parity() -> None:
    o = obs(
        Kind.STREAM_TEXT, [text("The sea."), text("The sea.")], [text("The sea."), text("Thesea.")]
    )
    status, findings, ev = run(o)
    assert status is Status.FAIL
    assert findings == [("stream_parity", Severity.MAJOR)]
    assert evaluate(ev, Policy()).metrics["stream_text_streamed_equals_baseline"] is False


def test_null_and_empty_content_are_the_same_text_but_finish_reasons_must_match() -> None:
    same = obs(Kind.STREAM_TEXT, [text(None), text("")], [text(None), text("")])
    assert judge(same, PLAN)[0] is ProbeStatus.PASS
    cut = Completion(status=200, content="", finish_reason="length")
    other = obs(Kind.STREAM_TEXT, [text(None), text("")], [text(None), cut])
    assert judge(other, PLAN)[0] is ProbeStatus.REGRESSED


def test_streamed_tool_arguments_that_are_not_json_fail_with_the_raw_string() -> None:
    good = call('{"city": "Paris"}')
    broken = call('{"city": "Par')
    status, findings, ev = run(obs(Kind.STREAM_TOOLS, [good, good], [good, broken]))
    assert status is Status.FAIL
    assert findings == [("invalid_tool_args", Severity.MAJOR)]
    assert '{"city": "Par' in evaluate(ev, Policy()).findings[0].message


def test_invalid_tool_args_block_even_when_the_baseline_streams_a_different_call() -> None:
    b = [call('{"city": "Paris"}'), call('{"city": "London"}')]
    c = [call('{"city": "Paris"}'), call("city=Paris")]
    assert judge(obs(Kind.STREAM_TOOLS, b, c), PLAN)[0] is ProbeStatus.REGRESSED


def test_the_same_invalid_arguments_on_both_sides_are_reported_as_info_not_blocking() -> None:
    broken = call('{"city": ",,\n"}')
    o = obs(Kind.STREAM_TOOLS, [broken, broken], [broken, broken])
    assert judge(o, PLAN)[0] is ProbeStatus.PASS
    status, findings, _ = run(o)
    assert status is Status.PASS
    assert findings == [("invalid_tool_args", Severity.INFO)]


def test_streamed_calls_equal_the_plain_calls_when_only_whitespace_differs() -> None:
    o = obs(
        Kind.STREAM_TOOLS,
        [call('{"city": "Paris"}'), call('{"city":"Paris"}')],
        [call('{"city": "Paris"}'), call('{ "city" : "Paris" }')],
    )
    assert judge(o, PLAN)[0] is ProbeStatus.PASS


def test_a_streamed_call_with_another_name_is_a_stream_parity_regression() -> None:
    good = call('{"city": "Paris"}')
    renamed = call('{"city": "Paris"}', name="get_time")
    _, findings, _ = run(obs(Kind.STREAM_TOOLS, [good, good], [good, renamed]))
    assert findings == [("stream_parity", Severity.MAJOR)]


def test_no_tool_calls_on_the_baseline_make_the_tools_probe_inconclusive() -> None:
    o = obs(Kind.STREAM_TOOLS, [text("Sunny"), text("Sunny")], [text("Sunny"), text("Sunny")])
    status, _, ev = run(o)
    assert status is Status.INCONCLUSIVE
    assert "tools unsupported" in evaluate(ev, Policy()).findings[0].message


PARIS = text("Paris")
CUT = failed(ErrorCategory.TIMEOUT, chunks=12)


def test_a_request_after_a_cancelled_stream_that_fails_is_a_cancellation_regression() -> None:
    o = obs(Kind.CANCEL, [PARIS, CUT, PARIS], [PARIS, CUT, failed(ErrorCategory.SERVER)])
    status, findings, _ = run(o)
    assert status is Status.FAIL
    assert findings == [("cancellation", Severity.MAJOR)]


def test_a_changed_answer_after_a_cancelled_stream_is_a_cancellation_regression() -> None:
    o = obs(Kind.CANCEL, [PARIS, CUT, PARIS], [PARIS, CUT, text("Lyon")])
    assert judge(o, PLAN)[0] is ProbeStatus.REGRESSED


def test_a_stream_that_ends_before_the_cut_leaves_cancellation_inconclusive() -> None:
    o = obs(Kind.CANCEL, [PARIS, CUT, PARIS], [PARIS, text("1, 2, 3"), PARIS])
    assert judge(o, PLAN)[0] is ProbeStatus.INCONCLUSIVE


def test_a_cut_before_the_first_token_is_not_mid_stream_and_stays_inconclusive() -> None:
    early = failed(ErrorCategory.TIMEOUT, chunks=0)
    o = obs(Kind.CANCEL, [PARIS, CUT, PARIS], [PARIS, early, PARIS])
    status, _, c = judge(o, PLAN)
    assert status is ProbeStatus.INCONCLUSIVE
    assert "before its first token" in c.why


def test_cancellation_that_leaves_the_server_serving_passes_with_the_chunk_count() -> None:
    o = obs(Kind.CANCEL, [PARIS, CUT, PARIS], [PARIS, CUT, PARIS])
    status, b, _ = judge(o, PLAN)
    assert status is ProbeStatus.PASS
    assert "12 token chunk" in b.why
    assert evaluate(run(o)[2], Policy()).metrics["cancel_chunks_before_cut_candidate"] == 12


def test_think_tags_in_content_where_the_baseline_has_none_are_a_reasoning_leak() -> None:
    leak = text("<think>91 = 7 x 13</think> No.")
    status, findings, _ = run(obs(Kind.REASONING, [text("No.")], [leak]))
    assert status is Status.FAIL
    assert findings == [("reasoning_leak", Severity.MAJOR)]


def test_think_tags_on_both_sides_are_baseline_fail_not_blocking() -> None:
    leak = text("<think>hm</think> No.")
    status, findings, _ = run(obs(Kind.REASONING, [leak], [leak]), COMPARED)
    assert status is Status.PASS
    assert findings == [("reasoning_leak", Severity.INFO)]


def test_content_that_repeats_the_reasoning_field_is_a_leak() -> None:
    thought = "91 is 7 times 13, so it is not prime"
    clean = text("No.", reasoning=thought)
    leaked = text(f"{thought}. No.", reasoning=thought)
    assert judge(obs(Kind.REASONING, [clean], [leaked]), PLAN)[0] is ProbeStatus.REGRESSED


def test_reasoning_leaks_are_caught_on_every_probe_not_only_the_reasoning_one() -> None:
    leak = text(f"<think>look it up</think> {NEEDLE.code}")
    status, findings, _ = run(obs(Kind.NEEDLE, [FOUND], [leak]))
    assert status is Status.FAIL
    assert findings == [("reasoning_leak", Severity.MAJOR)]


def test_zero_probes_are_inconclusive_never_pass() -> None:
    status, findings, _ = run()
    assert status is Status.INCONCLUSIVE
    assert findings == []


def test_the_default_plan_covers_each_position_each_length_and_every_other_kind() -> None:
    needles = [s.needle for s in steps(PLAN) if s.needle]  # the prefix-cache probe's included
    assert {n.position for n in needles} == {"start", "middle", "end"}
    assert {n.target_tokens for n in needles} == {500, 1500, 2500}
    kinds = [s.kind for s in steps(PLAN)]
    assert {k: kinds.count(k) for k in Kind if k is not Kind.NEEDLE} == dict.fromkeys(
        [k for k in Kind if k is not Kind.NEEDLE], 1
    )
    assert max(s.needle.estimated_tokens for s in steps(PLAN) if s.needle) < 4096


def test_the_full_grid_has_every_length_at_every_position() -> None:
    grid = full_grid()
    assert len(grid) == 9
    assert grid[4] == (1500, "middle")
    assert len(steps(ContextPlan(needles=grid))) == 13  # the cache probe doubles as one needle


@pytest.mark.parametrize(
    ("contexts", "tokens"),
    [
        ({"baseline": 4096, "candidate": 4096}, 3200),  # vLLM --max-model-len 4096
        ({"baseline": 32768, "candidate": 8192}, 6500),  # the smaller context bounds it
        ({"baseline": 2048, "candidate": None}, None),  # the plan's 2,500 already reach past it
        ({"baseline": None, "candidate": None}, None),  # llama-cpp-python does not say
    ],
    ids=["4k", "smaller-side", "short-context", "unknown"],
)
def test_a_needle_is_added_at_80_percent_of_the_smaller_discovered_context(
    contexts: dict[str, int | None], tokens: int | None
) -> None:
    assert long_needle(contexts, ContextPlan()) == tokens


def test_an_undiscoverable_context_leaves_the_long_needle_not_measured() -> None:
    ev = ContextEvidence((), "http://b/v1", "http://c/v1", "m", ContextPlan(),
                         {"baseline": None, "candidate": None}, None)  # fmt: skip
    result = evaluate(ev, Policy())
    check = next(c for c in result.checks if c.name == "long_needle")
    assert check.outcome == "not-measured"
    assert "neither side says its context length" in check.reason
