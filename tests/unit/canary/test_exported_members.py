"""servegate.canary's public names are deliberate, and the judgement imports no web or database
layer (the Flagger routes and the store recorder are imported by whoever mounts them)."""

from __future__ import annotations

import subprocess
import sys

import servegate.canary as canary


def test_all_lists_exactly_the_public_members() -> None:
    public = {name for name in vars(canary) if not name.startswith("_")}
    modules = {name for name in public if type(getattr(canary, name)).__name__ == "module"}
    assert set(canary.__all__) == public - modules


def test_importing_the_canary_imports_neither_starlette_nor_sqlalchemy_nor_scipy() -> None:
    code = (
        "import sys, servegate.canary; "
        "print([m for m in ('starlette', 'sqlalchemy', 'scipy') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
