"""Anyone who reaches the proxy's user port must not be able to end a canary: Flagger's
post-rollout (state-changing) answers only on the admin address (loopback by default) or to a
caller with the admin bearer token; the read-only hooks stay on the user port. No engine
needed: the canary is ended before anything is served."""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from .proxy_harness import RunningProxy, start_proxy

PAYLOAD = {"name": "llm", "namespace": "t", "phase": "Succeeded", "metadata": {}}
TOKEN = "admin-token-4c1d9e"


def _post(url: str, token: str | None = None) -> tuple[int, dict[str, Any]]:
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(url, data=json.dumps(PAYLOAD).encode(), headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def _args(tmp_path: Path, *extra: str) -> tuple[str, ...]:
    return (
        "--mode", "canary", "--steps", "10,100", "--interval", "60s",
        "--db", str(tmp_path / "proxy.db"), "--session", "admin",
        "--primary", "http://127.0.0.1:9/v1", "--candidate", "http://127.0.0.1:10/v1", *extra,
    )  # fmt: skip


def _phase(proxy: RunningProxy) -> str:
    phase: str = proxy.health()["canary"]["phase"]
    return phase


def test_the_user_port_cannot_end_a_canary_and_the_admin_address_can(tmp_path: Path) -> None:
    with start_proxy(*_args(tmp_path)) as proxy:
        refused = _post(f"{proxy.url}/servegate/flagger/post-rollout")
        guessed = _post(f"{proxy.url}/servegate/flagger/post-rollout", token="anything")
        read_only = _post(f"{proxy.url}/servegate/flagger/pre-rollout")
        after_refusal = _phase(proxy)
        assert proxy.admin_url is not None
        assert proxy.admin_url.startswith("http://127.0.0.1:")  # loopback
        admitted = _post(f"{proxy.admin_url}/servegate/flagger/post-rollout")
        finished = _phase(proxy)
    assert refused[0] == 403, refused
    assert "admin address" in refused[1]["reason"]
    assert guessed[0] == 403, guessed
    assert read_only[0] == 200, read_only
    assert after_refusal == "progressing"
    assert admitted[0] == 200, admitted
    assert finished == "finalised"


def test_the_admin_bearer_token_admits_a_caller_on_the_user_port(tmp_path: Path) -> None:
    with start_proxy(
        *_args(tmp_path, "--admin-token-env", "SERVEGATE_TEST_ADMIN_TOKEN"),
        env={"SERVEGATE_TEST_ADMIN_TOKEN": TOKEN},
    ) as proxy:
        wrong = _post(f"{proxy.url}/servegate/flagger/post-rollout", token=TOKEN + "x")
        still = _phase(proxy)
        right = _post(f"{proxy.url}/servegate/flagger/post-rollout", token=TOKEN)
        finished = _phase(proxy)
    assert wrong[0] == 403, wrong
    assert "does not match" in wrong[1]["reason"]
    assert still == "progressing"
    assert right[0] == 200, right
    assert finished == "finalised"


def test_a_user_listener_on_another_address_with_the_admin_port_number_cannot_end_a_canary(
    tmp_path: Path,
) -> None:
    """FAULTS 64: users on 127.0.0.2:P (standing for a host address such as 10.0.0.5:8081) and
    the admin address on 127.0.0.1:P, the same port number. Access is decided by the listening
    socket (address and port), so a user-side request is refused; the admin address admits."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.2", 0))
        port = probe.getsockname()[1]
    with start_proxy(
        *_args(tmp_path), listen=f"127.0.0.2:{port}", admin_listen=f"127.0.0.1:{port}"
    ) as proxy:
        assert proxy.url == f"http://127.0.0.2:{port}"
        assert proxy.admin_url == f"http://127.0.0.1:{port}"
        refused = _post(f"{proxy.url}/servegate/flagger/post-rollout")
        after_refusal = _phase(proxy)
        admitted = _post(f"{proxy.admin_url}/servegate/flagger/post-rollout")
        finished = _phase(proxy)
    assert refused[0] == 403, refused
    assert after_refusal == "progressing"
    assert admitted[0] == 200, admitted
    assert finished == "finalised"
