"""The one loader of YAML configuration: yaml.safe_load only, errors name the file and the key."""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from servegate.config.models import Policy

M = TypeVar("M", bound=BaseModel)


class ConfigError(Exception):
    """A configuration problem the user must fix; exit code 2."""

    exit_code = 2


def describe_validation_error(source: str, exc: ValidationError) -> str:
    """One readable line per problem: `source: path.to.key: message`."""
    parts = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "(top level)"
        parts.append(f"{source}: {loc}: {err['msg']}")
    return "; ".join(parts)


def read_yaml(path: Path) -> Any:
    """Parse a YAML file safely; python tags and syntax errors become ConfigError with the line."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"{path}:{where}: invalid YAML: {problem}") from None


def validate(model: type[M], data: Any, source: str) -> M:
    """Build a frozen model from plain data, or raise ConfigError naming each bad key."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(describe_validation_error(source, exc)) from None


def load_policy(path: Path) -> Policy:
    """Read a verdict policy YAML file (keys as in Policy)."""
    data = read_yaml(path)
    if data is None:
        data = {}
    return validate(Policy, data, str(path))
