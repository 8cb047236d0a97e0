"""How servegate starts a llama.cpp engine: its environment (no engine is started here)."""

from pathlib import Path
from typing import Any

import pytest

from servegate.engine import launch


def test_an_engine_waits_asleep_unless_the_environment_already_says() -> None:
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("OMP_WAIT_POLICY", raising=False)
        mp.setenv("SERVEGATE_TEST_KEPT", "1")
        env = launch.engine_env()
        assert env["OMP_WAIT_POLICY"] == "PASSIVE"
        assert env["SERVEGATE_TEST_KEPT"] == "1"  # the rest of this process's environment
        mp.setenv("OMP_WAIT_POLICY", "ACTIVE")
        assert launch.engine_env()["OMP_WAIT_POLICY"] == "ACTIVE"  # a value set here wins


class Started(Exception):
    """Raised by the stand-in spawn: the engine's command and environment were seen."""


@pytest.mark.parametrize("stock", [False, True])
def test_start_engine_gives_the_engine_process_that_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, stock: bool
) -> None:
    seen: list[dict[str, Any]] = []

    def spawn(argv: list[str], log_path: Path, **kwargs: Any) -> None:
        seen.append({"argv": argv, **kwargs})
        raise Started

    python = tmp_path / "python"
    python.touch()
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    monkeypatch.setenv("SERVEGATE_STOCK_PYTHON", str(python))
    monkeypatch.setattr(launch, "spawn", spawn)
    monkeypatch.setattr(launch, "require_llama_cpp", lambda: None)
    monkeypatch.setattr(launch, "shipped_model_path", lambda: tmp_path / "model.gguf")
    monkeypatch.setattr(launch, "variant_gguf", lambda *_: tmp_path / "model.gguf")
    with pytest.raises(Started):
        launch.start_engine("clean", log_path=tmp_path / "engine.log", stock=stock)
    assert [call["env"]["OMP_WAIT_POLICY"] for call in seen] == ["PASSIVE"]
