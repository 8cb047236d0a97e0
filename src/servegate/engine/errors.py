"""Engine errors, each carrying the CLI exit code it maps to.

EngineError
├── EngineMissingError  llama-cpp-python (the `engine` extra) is not installed (exit 2)
├── ModelMissingError   the package shipping the model is absent (exit 2)
├── UnknownNameError    a variant or fault that is not registered (exit 2)
└── EngineStartError    the server died or never answered a real completion (exit 3)
"""

from __future__ import annotations


class EngineError(RuntimeError):
    """Base of every reference-engine failure."""

    exit_code = 4


class EngineMissingError(EngineError):
    """llama-cpp-python, which the reference engine runs on, is not installed."""

    exit_code = 2


class ModelMissingError(EngineError):
    """The package that ships the reference model is not installed (or lacks the file)."""

    exit_code = 2


class UnknownNameError(EngineError):
    """A variant or fault name that is not in VARIANTS / FAULTS."""

    exit_code = 2


class EngineStartError(EngineError):
    """The engine died or never answered a real completion before its deadline."""

    exit_code = 3
