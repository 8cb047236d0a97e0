"""The transformers conversion's pure parts: cache keys, the served name, a missing install.

The conversion itself and `transformers serve` run in tests/integration/test_transformers_engine.py
(marker `transformers`: bash scripts/setup.sh transformers && bash scripts/test.sh -m transformers).
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import pytest

from servegate.engine.errors import EngineError
from servegate.engine.transformers_model import (
    SETUP_HINT,
    TransformersMissingError,
    convert,
    converted_dir,
    default_cache_root,
    file_sha256,
    main,
    served_link,
)


def test_the_cache_root_follows_xdg_cache_home(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert default_cache_root() == tmp_path / "servegate" / "transformers"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert default_cache_root() == Path.home() / ".cache" / "servegate" / "transformers"


def test_the_converted_folder_is_keyed_by_content_and_transformers_version(tmp_path: Path) -> None:
    gguf = tmp_path / "m.Q4_1.gguf"
    gguf.write_bytes(b"GGUF" + bytes(range(256)) * 5000)  # more than one 1 MiB read
    digest = hashlib.sha256(gguf.read_bytes()).hexdigest()
    assert file_sha256(gguf) == digest
    first = converted_dir(gguf, tmp_path / "cache", "5.24.0")
    assert first == tmp_path / "cache" / f"m.Q4_1-{digest[:16]}-transformers-5.24.0"
    assert converted_dir(gguf, tmp_path / "cache", "5.25.0") != first
    gguf.write_bytes(b"GGUF other weights")
    assert converted_dir(gguf, tmp_path / "cache", "5.24.0") != first


def test_the_served_link_points_at_the_folder_and_is_replaced_in_place(tmp_path: Path) -> None:
    old, new = tmp_path / "old", tmp_path / "new"
    old.mkdir()
    new.mkdir()
    link = served_link(old, "smollm2-135m-instruct")
    assert link == tmp_path / "served" / "smollm2-135m-instruct"
    assert link.resolve() == old.resolve()
    assert served_link(new, "smollm2-135m-instruct").resolve() == new.resolve()
    assert sorted(p.name for p in link.parent.iterdir()) == ["smollm2-135m-instruct"]


@pytest.mark.parametrize(
    "name", ["", "a/b", "../up", ".hidden"], ids=["empty", "slash", "up", "dot"]
)
def test_a_served_name_that_is_not_a_plain_name_is_refused(tmp_path: Path, name: str) -> None:
    with pytest.raises(EngineError, match="plain name"):
        served_link(tmp_path, name)
    assert not (tmp_path / "served").exists() or not any((tmp_path / "served").iterdir())


def test_without_transformers_installed_the_error_names_the_setup_command(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "transformers", None)  # `import transformers` fails
    with pytest.raises(TransformersMissingError, match=SETUP_HINT) as caught:
        convert(tmp_path / "m.gguf", tmp_path / "cache")
    assert caught.value.exit_code == 2
    assert main(["convert", "--cache-dir", str(tmp_path / "cache")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ")
    assert err.count("\n") == 1
    assert not (tmp_path / "cache").exists()  # nothing half-written
