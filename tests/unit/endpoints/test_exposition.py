"""The Prometheus text format as servers write it: vLLM, SGLang, TGI and llama.cpp samples."""

from __future__ import annotations

import math

import pytest

from servegate.endpoints.exposition import MetricSample, parse_exposition

VLLM = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.4375
vllm:iteration_tokens_total_bucket{le="+Inf",model_name="m"} 12.0
vllm:prompt_tokens_total{model_name="m"} 8.128902e+06
"""


def test_vllm_samples_keep_their_names_labels_and_values() -> None:
    exp = parse_exposition(VLLM)
    assert exp.bad_lines == ()
    assert exp.samples[0] == MetricSample(
        "vllm:num_requests_running", (("engine", "0"), ("model_name", "m")), 3.0
    )
    assert exp.values("vllm:kv_cache_usage_perc") == (0.4375,)
    assert exp.samples[2].labels == (("le", "+Inf"), ("model_name", "m"))
    assert exp.values("vllm:prompt_tokens_total") == (8128902.0,)


@pytest.mark.parametrize(
    ("line", "value"),
    [
        ("tgi_queue_size 7", 7.0),
        ("tgi_queue_size 7 1712345678000", 7.0),
        ("llamacpp:requests_deferred\t2", 2.0),
        ('m{a="x"} -1.5e-3', -0.0015),
        ('m{a="x",} 1', 1.0),
        ('m{ a = "x" } 1', 1.0),
        ('m{a="1"} 2.5 # {trace_id="abc"} 1.0', 2.5),
        ("m .5", 0.5),
        ("m +Inf", math.inf),
        ("m -Inf", -math.inf),
    ],
    ids=["bare", "timestamp", "tab", "exponent", "trailing-comma", "spaces", "exemplar",
         "leading-dot", "plus-inf", "minus-inf"],
)  # fmt: skip
def test_sample_lines_in_every_allowed_shape(line: str, value: float) -> None:
    exp = parse_exposition(line)
    assert exp.bad_lines == ()
    [sample] = exp.samples
    assert sample.value == value


def test_escaped_label_values_are_unescaped() -> None:
    [sample] = parse_exposition('m{path="C:\\\\tmp",q="say \\"hi\\"",n="a\\nb"} 1').samples
    assert dict(sample.labels) == {"path": "C:\\tmp", "q": 'say "hi"', "n": "a\nb"}


def test_nan_is_kept_but_not_a_value_to_summarise() -> None:
    exp = parse_exposition('sglang:token_usage NaN\nsglang:token_usage{r="1"} 0.25')
    assert math.isnan(exp.samples[0].value)
    assert exp.values("sglang:token_usage") == (0.25,)


@pytest.mark.parametrize(
    "line",
    [
        "m",
        "m{a=x} 1",
        'm{a="x} 1',
        'm{a="x"',
        "m one",
        "m 1 2 3",
        "9m 1",
        'm{a="\\q"} 1',
        "<html><body>Not Found</body></html>",
    ],
    ids=["no-value", "unquoted", "unterminated", "no-brace", "word", "three-fields",
         "digit-name", "bad-escape", "html"],
)  # fmt: skip
def test_a_line_that_does_not_parse_is_counted_and_the_others_kept(line: str) -> None:
    exp = parse_exposition(f"good 1\n{line}\nalso_good 2\n")
    assert exp.bad_lines == (2,)
    assert [s.name for s in exp.samples] == ["good", "also_good"]


def test_comments_blank_lines_crlf_and_eof_carry_no_sample() -> None:
    exp = parse_exposition("# HELP x y\r\n\r\n# TYPE x gauge\r\nx 1\r\n# EOF\r\n")
    assert exp.samples == (MetricSample("x", (), 1.0),)
    assert exp.bad_lines == ()
