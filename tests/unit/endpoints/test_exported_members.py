"""The package's public names are deliberate (httpx keeps the same guard)."""

from __future__ import annotations

import servegate.endpoints as endpoints


def test_all_lists_exactly_the_public_members() -> None:
    public = {name for name in vars(endpoints) if not name.startswith("_")}
    modules = {name for name in public if type(getattr(endpoints, name)).__name__ == "module"}
    assert set(endpoints.__all__) == public - modules


def test_importing_the_protocol_does_not_import_the_http_client() -> None:
    import subprocess
    import sys

    code = "import sys, servegate.endpoints; print('aiohttp' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
