"""Secrets are taken out of what the proxy writes; what is not a secret is left alone."""

from __future__ import annotations

import pytest

from servegate.proxy.redaction import MARK, redact_headers, redact_text, redact_value


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("my key is sk-proj-abcdefghijklmnop", "sk-proj-abcdefghijklmnop"),
        ("Authorization: Bearer abc.def-ghi_jklmnop", "abc.def-ghi_jklmnop"),
        ("token ghp_0123456789abcdefABCDEF", "ghp_0123456789abcdefABCDEF"),
        ("api_key=hunter2hunter2", "hunter2hunter2"),
        ("jwt eyJhbGciOiJIUzI1.eyJzdWIiOiIxMjM0.SflKxwRJSMeKKF2QT4", "SflKxwRJSMeKKF2QT4"),
    ],
    ids=["openai-key", "bearer", "github-token", "key-assignment", "jwt"],
)
def test_key_like_strings_are_redacted(text: str, secret: str) -> None:
    redacted = redact_text(text)
    assert secret not in redacted
    assert MARK in redacted


def test_ordinary_text_is_kept() -> None:
    text = "The skies are blue; a token of thanks. sk- alone is fine, Bearer of news."
    assert redact_text(text) == text


def test_secret_named_fields_lose_their_value_but_token_counts_stay() -> None:
    body = {
        "api_key": "short",
        "nested": [{"password": "p"}, {"access_token": "t"}],
        "max_tokens": 16,
        "logprobs": [{"token": "hello", "logprob": -0.1}],
        "messages": [{"role": "user", "content": "use sk-abcdefghijklmnopq"}],
    }
    assert redact_value(body) == {
        "api_key": MARK,
        "nested": [{"password": MARK}, {"access_token": MARK}],
        "max_tokens": 16,
        "logprobs": [{"token": "hello", "logprob": -0.1}],
        "messages": [{"role": "user", "content": f"use {MARK}"}],
    }


def test_credential_headers_are_marked_and_others_kept() -> None:
    headers = [
        ("Authorization", "Bearer sk-x"),
        ("Cookie", "a=b"),
        ("X-Api-Key", "k"),
        ("OpenAI-Organization", "org"),
        ("X-Session-Id", "s"),
        ("Content-Type", "application/json"),
        ("User-Agent", "OpenAI/Python"),
    ]
    assert redact_headers(headers) == {
        "authorization": MARK,
        "cookie": MARK,
        "x-api-key": MARK,
        "openai-organization": MARK,
        "x-session-id": MARK,
        "content-type": "application/json",
        "user-agent": "OpenAI/Python",
    }
