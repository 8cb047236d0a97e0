"""The admin address is a listening socket (address and port), never a port number alone."""

from __future__ import annotations

import pytest

from servegate.proxy.admin import AdminAccess


@pytest.mark.parametrize(
    ("listeners", "server", "admitted"),
    [
        ([("127.0.0.1", 8081)], ("127.0.0.1", 8081), True),
        ([("127.0.0.1", 8081)], ("10.0.0.5", 8081), False),
        ([("127.0.0.1", 8081)], ("127.0.0.1", 8080), False),
        ([("0.0.0.0", 8081)], ("10.0.0.5", 8081), True),
        ([("::", 8081)], ("10.0.0.5", 8081), True),
        ([("127.0.0.1", 8081)], ("::ffff:127.0.0.1", 8081), True),
        ([("::1", 8081)], ("::1", 8081), True),
        ([], ("127.0.0.1", 8081), False),
    ],
    ids=["same-socket", "same-port-other-address", "other-port", "wildcard-v4",
         "wildcard-v6", "v4-mapped", "v6-loopback", "no-admin-listener"],
)  # fmt: skip
def test_a_request_is_admitted_only_on_an_admin_socket(
    listeners: list[tuple[str, int]], server: tuple[str, int], admitted: bool
) -> None:
    access = AdminAccess.of(None, listeners)
    assert access.admits(server) is admitted
    refusal = access.refusal_of({"server": server, "headers": []})
    assert (refusal is None) is admitted
