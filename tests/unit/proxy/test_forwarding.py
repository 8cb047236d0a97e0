"""What travels where: upstream URLs from settings only, and the headers each side gets."""

from __future__ import annotations

import pytest

from servegate.proxy.forwarding import candidate_headers, response_headers, upstream_headers
from servegate.proxy.limits import path_escape
from servegate.proxy.settings import ProxySettings, ProxySettingsError, Upstream

USER = [
    (b"host", b"evil.example"),
    (b"authorization", b"Bearer sk-user"),
    (b"cookie", b"a=b"),
    (b"content-type", b"application/json"),
    (b"accept", b"text/event-stream"),
    (b"connection", b"keep-alive"),
    (b"x-request-id", b"r1"),
]


def test_the_primary_gets_the_users_end_to_end_headers_but_not_host() -> None:
    assert upstream_headers(USER) == [
        ("authorization", "Bearer sk-user"),
        ("cookie", "a=b"),
        ("content-type", "application/json"),
        ("accept", "text/event-stream"),
        ("x-request-id", "r1"),
    ]


def test_the_candidate_gets_only_the_body_type_and_its_own_key() -> None:
    assert candidate_headers(USER, "sk-cand") == {
        "content-type": "application/json",
        "accept": "text/event-stream",
        "authorization": "Bearer sk-cand",
    }
    assert "authorization" not in candidate_headers(USER, None)


def test_hop_by_hop_response_headers_are_dropped_and_content_length_kept() -> None:
    raw = [(b"Content-Length", b"5"), (b"Transfer-Encoding", b"chunked"), (b"X-A", b"1")]
    assert response_headers(raw) == [(b"content-length", b"5"), (b"x-a", b"1")]


@pytest.mark.parametrize(
    ("given", "origin", "prefix"),
    [
        ("http://127.0.0.1:8000/v1", "http://127.0.0.1:8000", ""),
        ("http://127.0.0.1:8000/v1/", "http://127.0.0.1:8000", ""),
        ("https://gw.example/llm/v1", "https://gw.example", "/llm"),
        ("http://host:9", "http://host:9", ""),
    ],
    ids=["v1", "v1-slash", "prefix", "origin"],
)
def test_an_upstream_is_an_origin_and_a_prefix(given: str, origin: str, prefix: str) -> None:
    upstream = Upstream.parse("primary", given)
    assert (upstream.origin, upstream.prefix) == (origin, prefix)


def test_a_request_path_cannot_move_the_request_to_another_host() -> None:
    upstream = Upstream.parse("primary", "http://127.0.0.1:8000/v1")
    assert upstream.url(b"//evil.example/v1/x", b"") == "http://127.0.0.1:8000//evil.example/v1/x"
    assert upstream.url(b"/v1/models", b"a=1") == "http://127.0.0.1:8000/v1/models?a=1"


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ("http://user:pw@h/v1", "must not carry credentials"),
        ("ftp://h/v1", "must be http(s)://"),
        ("http://h/v1?x=1", "query or fragment"),
    ],
    ids=["credentials", "scheme", "query"],
)
def test_a_bad_upstream_is_refused(given: str, message: str) -> None:
    with pytest.raises(ProxySettingsError) as caught:
        Upstream.parse("candidate", given)
    assert message in str(caught.value)
    assert "pw" not in str(caught.value)


def test_the_primary_cannot_be_the_candidate_and_the_sample_is_a_share() -> None:
    same = Upstream.parse("primary", "http://h:1/v1")
    with pytest.raises(ProxySettingsError, match="same upstream"):
        ProxySettings(primary=same, candidate=Upstream.parse("candidate", "http://h:1"))
    with pytest.raises(ProxySettingsError, match="sample"):
        ProxySettings(primary=same, candidate=Upstream.parse("c", "http://h:2"), sample=1.5)


def test_headers_named_in_connection_are_hop_by_hop_both_ways() -> None:
    request = [(b"connection", b"close, X-Hop"), (b"x-hop", b"1"), (b"x-keep", b"2")]
    assert upstream_headers(request) == [("x-keep", "2")]
    response = [(b"Connection", b"x-hop"), (b"X-Hop", b"1"), (b"content-length", b"3")]
    assert response_headers(response) == [(b"content-length", b"3")]


def test_x_forwarded_for_is_appended_and_accept_encoding_narrowed_to_what_is_read() -> None:
    raw = [(b"x-forwarded-for", b"10.0.0.1"), (b"accept-encoding", b"br, gzip;q=0.8, zstd")]
    assert upstream_headers(raw, "192.0.2.7") == [
        ("accept-encoding", "gzip;q=0.8"),
        ("x-forwarded-for", "10.0.0.1, 192.0.2.7"),
    ]
    assert upstream_headers([(b"accept-encoding", b"br")], None) == []


@pytest.mark.parametrize(
    ("path", "refused"),
    [
        (b"/v1/chat/completions", False),
        (b"/v1/models/a%20b", False),
        (b"/v1/../admin", True),
        (b"/v1/%2e%2e/admin", True),
        (b"/v1/%2E./admin", True),
        (b"/v1/.", True),
        (b"/v1%2fadmin", True),
        (b"/v1%5Cadmin", True),
        (b"/v1/..\\admin", True),
    ],
    ids=["plain", "encoded-space", "dotdot", "encoded-dotdot", "mixed-case", "dot", "enc-slash",
         "enc-backslash", "backslash"],
)  # fmt: skip
def test_no_path_can_leave_the_upstream_prefix(path: bytes, refused: bool) -> None:
    assert (path_escape(path) is not None) is refused
