"""The one redactor: key-like flags, assignments and mappings hidden in argv, in shell strings
and in log lines; a known secret value masked wherever it appears."""

from __future__ import annotations

import pytest

from servegate.config.redaction import (
    HIDDEN,
    command_secrets,
    hide,
    redact_argv,
    redact_text,
    shown_command,
)

PW = "pw-canary-81d3c7"
KEY = "sk-canary-5f0c1e9a7b"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (f"exec engine --password {PW} --port 1", f"exec engine --password {HIDDEN} --port 1"),
        (f"engine --api-key={KEY} --port 1", f"engine --api-key={HIDDEN} --port 1"),
        (f"API_KEY={KEY} exec engine", f"API_KEY={HIDDEN} exec engine"),
        (f"engine --password '{PW} two' --port 1", f"engine --password {HIDDEN} --port 1"),
        (f'engine --token="{PW}" --x 1', f"engine --token={HIDDEN} --x 1"),
        (
            f"non-default args: {{'port': 1, 'api_key': ['{KEY}'], 'model': 'm'}}",
            f"non-default args: {{'port': 1, 'api_key': [{HIDDEN}], 'model': 'm'}}",
        ),
        (f'{{"hf_token": "{PW}", "max_tokens": 5}}', f'{{"hf_token": {HIDDEN}, "max_tokens": 5}}'),
        ("engine --max-tokens 5 --tokenizer t", "engine --max-tokens 5 --tokenizer t"),
    ],
    ids=[
        "flag-space",
        "flag-equals",
        "env-assignment",
        "quoted-value",
        "double-quoted",
        "python-mapping",
        "json-mapping",
        "not-secret",
    ],
)
def test_key_like_values_are_hidden_in_text(text: str, expected: str) -> None:
    assert redact_text(text) == expected


def test_a_shell_string_argument_is_redacted_inside() -> None:
    argv = ["sh", "-c", f"exec engine --password {PW} --api-key={KEY} --port {{port}}"]
    shown = shown_command(argv)
    assert PW not in shown
    assert KEY not in shown
    assert shown == "sh -c 'exec engine --password *** --api-key=*** --port {port}'"


def test_flag_shaped_arguments_keep_their_shape() -> None:
    shown = shown_command(["vllm", "serve", "m", "--api-key", "s3cret", "--hf-token=abc"])
    assert shown == "vllm serve m --api-key '***' '--hf-token=***'"
    assert redact_argv(["e", "--api-key", "s3cret"]) == ["e", "--api-key", HIDDEN]


def test_the_secret_values_of_a_command_are_found_for_masking_elsewhere() -> None:
    argv = ["sh", "-c", f"API_TOKEN=tk-0123 exec engine --password '{PW}' --api-key={KEY}",
            "--hf-token", "hf-abcdef"]  # fmt: skip
    assert sorted(command_secrets(argv)) == sorted([PW, KEY, "tk-0123", "hf-abcdef"])


def test_a_known_secret_is_masked_wherever_it_appears() -> None:
    line = f"loaded; the key {KEY} works (again: x{KEY}y)"
    assert hide(line, [KEY]) == f"loaded; the key {HIDDEN} works (again: x{HIDDEN}y)"


def test_a_value_cut_short_after_its_opening_quote_is_still_hidden() -> None:
    assert redact_text(f'engine --api-key "{KEY}') == f"engine --api-key {HIDDEN}"


def test_a_shell_operator_ends_a_hidden_value() -> None:
    assert redact_text(f"engine --api-key={KEY}; echo ok") == f"engine --api-key={HIDDEN}; echo ok"
    assert command_secrets(["sh", "-c", f"engine --api-key={KEY}&& echo"]) == [KEY]


def test_a_value_a_shell_string_repeats_in_free_text_is_masked_in_the_shown_command() -> None:
    shown = shown_command(["sh", "-c", f"engine --api-key {KEY}; echo using {KEY}"])
    assert KEY not in shown
