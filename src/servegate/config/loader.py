"""The one loader of YAML configuration: yaml.safe_load only, errors name the file and the key."""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from servegate.config.models import GateConfig, Policy

M = TypeVar("M", bound=BaseModel)


class ConfigError(Exception):
    """A configuration problem the user must fix; exit code 2."""

    exit_code = 2


def describe_validation_error(
    source: str, exc: ValidationError, flags: Mapping[str, str] | None = None
) -> str:
    """One readable line per problem: `source: path.to.key: message`, or `--flag: message` for
    a key set by the command-line option `flags` maps it to (the longest matching key prefix);
    a problem two keys share through one option (`baseline record --endpoint` sets both sides)
    is said once."""
    parts: list[str] = []
    for err in exc.errors():
        path = [str(p) for p in err["loc"]]
        flag = next(
            (
                flags[key]
                for n in range(len(path), 0, -1)
                if flags and (key := ".".join(path[:n])) in flags
            ),
            None,
        )
        where = flag if flag is not None else f"{source}: {'.'.join(path) or '(top level)'}"
        line = f"{where}: {err['msg']}"
        if line not in parts:
            parts.append(line)
    return "; ".join(parts)


def read_yaml(path: Path) -> Any:
    """Parse a YAML file safely; python tags and syntax errors become ConfigError with the line."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        line = path.read_bytes()[: exc.start].count(b"\n") + 1
        bad = exc.object[exc.start : exc.start + 1]
        raise ConfigError(
            f"{path}: not UTF-8 text (line {line}, byte {exc.start}: {bad!r}); save it as UTF-8"
        ) from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"{path}:{where}: invalid YAML: {problem}") from None


def validate(model: type[M], data: Any, source: str, flags: Mapping[str, str] | None = None) -> M:
    """Build a frozen model from plain data, or raise ConfigError naming each bad key (or the
    command-line option that set it: `flags`, key path -> option)."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(describe_validation_error(source, exc, flags)) from None


def load_policy(path: Path) -> Policy:
    """Read a verdict policy YAML file (keys as in Policy)."""
    data = read_yaml(path)
    if data is None:
        data = {}
    return validate(Policy, data, str(path))


def merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """`over` on top of `base`: mappings merged key by key, anything else replaced."""
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


def relative_to(folder: Path, value: Any) -> Any:
    if isinstance(value, str) and value and not Path(value).is_absolute():
        return str(folder / value)
    return value


def read_gate_file(path: Path) -> dict[str, Any]:
    """The mapping of a `servegate gate --config` file (keys as in GateConfig). Relative paths
    of `suite`, `log_patterns` and each launch's `cwd` are taken from the file's folder."""
    data = read_yaml(path)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of settings, got {type(data).__name__}")
    unknown = sorted(str(k) for k in data if k not in GateConfig.model_fields)
    if unknown:
        raise ConfigError(f"{path}: {unknown[0]}: unknown key (known: "
                          f"{', '.join(GateConfig.model_fields)})")  # fmt: skip
    folder = path.parent
    for key in ("suite", "log_patterns"):
        if key in data:
            data[key] = relative_to(folder, data[key])
    for side in ("baseline", "candidate", "baseline_replica"):
        launch = data.get(side, {}).get("launch") if isinstance(data.get(side), dict) else None
        if isinstance(launch, dict) and "cwd" in launch:
            launch["cwd"] = relative_to(folder, launch["cwd"])
    return data


def writable_folder(path: Path, option: str) -> None:
    """ConfigError (one line, naming `option`) unless `path` is a folder servegate can create
    and write a file in; checked before a long run or a launched engine needs it."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".servegate-write-check-"):
            pass
    except OSError as exc:
        raise ConfigError(
            f"{option} {path}: cannot write there: {exc.strerror or type(exc).__name__}"
        ) from None
