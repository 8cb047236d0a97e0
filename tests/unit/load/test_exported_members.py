"""The package's public names are deliberate (httpx keeps the same guard)."""

from __future__ import annotations

import servegate.load as load


def test_all_lists_exactly_the_public_members() -> None:
    public = {name for name in vars(load) if not name.startswith("_")}
    modules = {name for name in public if type(getattr(load, name)).__name__ == "module"}
    assert set(load.__all__) == public - modules


def test_every_module_declares_what_it_exports() -> None:
    import importlib
    import pkgutil

    for info in pkgutil.iter_modules(load.__path__):
        module = importlib.import_module(f"servegate.load.{info.name}")
        assert hasattr(module, "__all__"), info.name


def test_load_sees_the_endpoint_protocol_not_the_http_client() -> None:
    import subprocess
    import sys

    code = "import sys, servegate.load; print('aiohttp' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
