from pathlib import Path

from servegate.load import (
    GoldenWorkload,
    SyntheticWorkload,
    golden_source,
    golden_workload,
    read_replay,
    replay_source,
    replay_workload,
    synthetic_source,
)
from servegate.load.synthetic import INSTRUCTION, WORDS, synthetic_prompt
from servegate.load.workload import streamed
from servegate.probes import default_suite


def test_synthetic_prompts_are_deterministic_from_seed_and_index() -> None:
    assert synthetic_prompt(1, 5, 64) == synthetic_prompt(1, 5, 64)
    assert synthetic_prompt(1, 5, 64) != synthetic_prompt(1, 6, 64)
    assert synthetic_prompt(1, 5, 64) != synthetic_prompt(2, 5, 64)


def test_a_synthetic_prompt_has_one_word_per_token_after_the_instruction() -> None:
    prompt = synthetic_prompt(0, 0, 100)
    assert prompt.startswith(INSTRUCTION + " ")
    words = prompt[len(INSTRUCTION) + 1 :].split()
    assert len(words) == 100 - 9
    assert set(words) <= set(WORDS)


def test_a_tiny_synthetic_prompt_still_has_one_word() -> None:
    assert len(synthetic_prompt(0, 0, 1)[len(INSTRUCTION) :].split()) == 1


def test_synthetic_requests_stream_with_usage_and_ask_for_the_output_length() -> None:
    spec = SyntheticWorkload(input_tokens=32, output_tokens=7, seed=3)
    source = synthetic_source(spec, "m")
    item = source(4)
    assert item == source(4)
    assert item.api == "chat"
    assert item.body["model"] == "m"
    assert item.body["max_tokens"] == 7
    assert item.body["stream"] is True
    assert item.body["stream_options"] == {"include_usage": True}
    assert item.body["messages"][0]["content"] == synthetic_prompt(3, 4, 32)
    assert (item.input_tokens, item.max_tokens) == (32, 7)


def test_golden_requests_cycle_through_the_suite_in_order() -> None:
    suite = default_suite()
    source = golden_source(suite, "m")
    n = len(suite.probes)
    assert [source(i).label for i in range(n)] == [p.id for p in suite.probes]
    assert source(n).label == suite.probes[0].id
    json_probes = {source(i).label for i in range(n) if source(i).expects_json}
    assert json_probes == {"json-object-mode", "json-schema-mode"}
    completions = {source(i).label for i in range(n) if source(i).api == "completions"}
    assert completions == {"usage-text-completion"}
    spec = golden_workload(suite)
    assert isinstance(spec, GoldenWorkload)
    assert spec.probe_ids == tuple(p.id for p in suite.probes)


def test_replayed_bodies_keep_their_model_unless_told_otherwise(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(
        '{"model": "own", "messages": [], "stream": false}\n{"prompt": "p", "max_tokens": 3}\n'
    )
    traffic = read_replay(path)
    kept = replay_source(traffic, "chosen", keep_model=True)
    forced = replay_source(traffic, "chosen", keep_model=False)
    assert kept(0).body["model"] == "own"
    assert kept(1).body["model"] == "chosen"
    assert forced(0).body["model"] == "chosen"
    assert kept(0).body["stream"] is True  # TTFT needs the stream
    assert (kept(1).api, kept(1).max_tokens, kept(1).label) == ("completions", 3, "line 2")
    spec = replay_workload(traffic, 0.5)
    assert (spec.requests, spec.timestamps, spec.time_scale) == (2, False, 0.5)
    assert spec.sha256 == traffic.sha256


def test_streaming_keeps_other_stream_options() -> None:
    body = streamed({"stream_options": {"continuous_usage_stats": True}}, None)
    assert body["stream_options"] == {"continuous_usage_stats": True, "include_usage": True}
    assert "model" not in body
