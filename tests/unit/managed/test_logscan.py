"""The start-up log scan against the shipped catalogue and a user's."""

from __future__ import annotations

from pathlib import Path

import pytest

from servegate.config.loader import ConfigError
from servegate.managed.logscan import MAX_HITS_PER_PATTERN, load_catalogue, scan

# Printed by llama-cpp-python 0.3.16 on every CPU start-up of the reference model (measured).
LLAMA_FALLBACK = (
    "load_tensors: tensor 'token_embd.weight' (q8_0) (and 272 others) cannot be used with "
    "preferred buffer type CPU_REPACK, using CPU instead"
)


@pytest.mark.parametrize(
    ("line", "kind", "module"),
    [
        (LLAMA_FALLBACK, "fallback", None),
        ("WARNING: Falling back to the eager attention implementation", "fallback", None),
        ("Cannot use FlashAttention-2 backend for Volta GPUs.", "fallback", None),
        ("ggml: unsupported op ROPE_BACK on this device", "unsupported-operator", None),
        ("RuntimeError: CUDA error: no kernel image is available for execution", "kernel-not-found",
         None),
        ("--engine-use-ray is deprecated and will be removed", "deprecated-flag", None),
        ("ModuleNotFoundError: No module named 'soundfile'", "optional-dependency", "soundfile"),
        ("ImportError: cannot import name 'x' from 'flashinfer.jit'", "optional-dependency",
         "flashinfer.jit"),
        ("OSError: libavutil.so.58: cannot open shared object file: No such file",
         "optional-dependency", "libavutil"),
    ],
    ids=["llama.cpp-repack", "eager", "backend", "op", "kernel", "deprecated", "module",
         "import-name", "shared-library"],
)  # fmt: skip
def test_each_class_of_line_is_recognised(line: str, kind: str, module: str | None) -> None:
    [hit] = [h for h in scan(["INFO: starting", line], load_catalogue()) if h.kind == kind]
    assert (hit.line_no, hit.line, hit.module) == (2, line, module)


def test_an_ordinary_start_up_log_has_no_hit() -> None:
    lines = ["INFO:     Started server process [1]", "llama_context: n_ctx = 4096",
             "INFO:     Uvicorn running on http://127.0.0.1:8000"]  # fmt: skip
    assert scan(lines, load_catalogue()) == ()


def test_a_traceback_is_reported_with_the_exception_that_ends_it() -> None:
    lines = [
        "Traceback (most recent call last):",
        '  File "x.py", line 1, in <module>',
        "    import vllm_ffmpeg",
        "ModuleNotFoundError: No module named 'vllm_ffmpeg'",
    ]
    hits = scan(lines, load_catalogue())
    assert [(h.kind, h.line_no) for h in hits] == [("traceback", 1), ("optional-dependency", 4)]
    assert hits[0].line.endswith("ModuleNotFoundError: No module named 'vllm_ffmpeg'")
    assert hits[1].module == "vllm_ffmpeg"


def test_a_repeated_warning_is_counted_at_most_a_few_times() -> None:
    hits = scan([f"layer {i}: falling back to CPU" for i in range(50)], load_catalogue())
    assert len(hits) == MAX_HITS_PER_PATTERN


def test_a_user_file_adds_patterns_and_replaces_a_shipped_one(tmp_path: Path) -> None:
    user = tmp_path / "patterns.yaml"
    user.write_text(
        "patterns:\n"
        "  - {id: my-engine-slow, class: fallback, severity: major, regex: 'SLOWPATH engaged'}\n"
        "  - {id: deprecated, class: deprecated-flag, severity: info, regex: 'obsolete'}\n"
    )
    catalogue = load_catalogue(user)
    hits = scan(["SLOWPATH engaged for layer 3", "flag --x is obsolete", "deprecated"], catalogue)
    assert [(h.pattern, h.severity.value) for h in hits] == [
        ("my-engine-slow", "major"),
        ("deprecated", "info"),
    ]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "patterns:\n  - {id: a, class: fallback, regex: '(unclosed'}\n",
            "not a regular expression",
        ),
        ("patterns:\n  - {id: a, class: speed, regex: 'x'}\n", "patterns.0.class"),
        ("patterns:\n  - {id: a, class: fallback, regex: 'x', colour: red}\n", "colour"),
        ("- just a list\n", "expected a mapping"),
    ],
    ids=["bad-regex", "unknown-class", "unknown-key", "not-a-mapping"],
)
def test_a_bad_user_catalogue_is_a_config_error(tmp_path: Path, text: str, expected: str) -> None:
    user = tmp_path / "patterns.yaml"
    user.write_text(text)
    with pytest.raises(ConfigError, match=r"patterns\.yaml") as caught:
        load_catalogue(user)
    assert expected in str(caught.value)
