"""The embedded reference engine: llama.cpp serving the shipped SmolLM2 model, plus faults.

Imports nothing else from servegate, so it stays an independent oracle for the gates.
"""

from servegate.engine.errors import (
    EngineError,
    EngineMissingError,
    EngineStartError,
    ModelMissingError,
    UnknownNameError,
)
from servegate.engine.faults import FAULTS, FaultOptions
from servegate.engine.launch import (
    MODEL_ALIAS,
    RESET_PROMPT,
    RunningEngine,
    answers_completion,
    require_llama_cpp,
    start_engine,
)
from servegate.engine.model import shipped_model_path
from servegate.engine.variants import BENIGN_VARIANT, VARIANTS, Variant

__all__ = [
    "BENIGN_VARIANT",
    "FAULTS",
    "MODEL_ALIAS",
    "RESET_PROMPT",
    "VARIANTS",
    "EngineError",
    "EngineMissingError",
    "EngineStartError",
    "FaultOptions",
    "ModelMissingError",
    "RunningEngine",
    "UnknownNameError",
    "Variant",
    "answers_completion",
    "require_llama_cpp",
    "shipped_model_path",
    "start_engine",
]
