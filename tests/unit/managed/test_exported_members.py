"""The public names of the managed and environment packages are deliberate."""

from __future__ import annotations

import subprocess
import sys
from types import ModuleType

import pytest

import servegate.environment as environment
import servegate.managed as managed


@pytest.mark.parametrize("package", [managed, environment], ids=["managed", "environment"])
def test_all_lists_exactly_the_public_members(package: ModuleType) -> None:
    public = {name for name in vars(package) if not name.startswith("_")}
    modules = {name for name in public if type(getattr(package, name)).__name__ == "module"}
    assert set(package.__all__) == public - modules


def test_the_reference_engine_still_imports_nothing_else_from_servegate() -> None:
    code = (
        "import sys, servegate.engine.process, servegate.engine.launch; "
        "print(sorted({m.split('.')[1] for m in sys.modules "
        "if m.startswith('servegate.') and m.count('.') >= 1}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "['engine']"
