"""Reading suites: yaml.safe_load only, and every error names the file, line and config path."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from servegate.config.loader import ConfigError
from servegate.probes.models import Suite

Key = str | int
_TAG_ERRORS = {"union_tag_invalid", "union_tag_not_found"}


class SuiteError(ConfigError):
    """A suite file that cannot be used; exit code 2, one problem per line of the message."""


def _line_map(text: str) -> tuple[dict[tuple[Key, ...], int], list[tuple[int | None, str]]]:
    """1-based line of every key path in the document, and duplicate-key problems."""
    lines: dict[tuple[Key, ...], int] = {}
    duplicates: list[tuple[int | None, str]] = []

    def walk(node: yaml.Node, path: tuple[Key, ...], above: frozenset[int]) -> None:
        lines.setdefault(path, node.start_mark.line + 1)
        if id(node) in above:  # a recursive alias: the line is known, nothing new below
            return
        above = above | {id(node)}
        if isinstance(node, yaml.MappingNode):
            seen: set[str] = set()
            for key_node, value_node in node.value:
                key = str(key_node.value)
                child = (*path, key)
                if key in seen:
                    duplicates.append(
                        (key_node.start_mark.line + 1, f"{_dotted(child)}: duplicate key")
                    )
                seen.add(key)
                lines[child] = key_node.start_mark.line + 1
                walk(value_node, child, above)
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                walk(item, (*path, i), above)

    root = yaml.compose(text, Loader=yaml.SafeLoader)
    if root is not None:
        walk(root, (), frozenset())
    return lines, duplicates


def _dotted(path: Sequence[Key]) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def _data_path(loc: Sequence[Key], data: Any) -> tuple[Key, ...]:
    """Map a pydantic error location onto the document, dropping union tags like `equals`."""
    path: list[Key] = []
    node = data
    for part in loc:
        if isinstance(node, list) and isinstance(part, int):
            node = node[part] if part < len(node) else None
        elif isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, dict) and node.get("type") == part:
            continue
        else:
            node = None
        path.append(part)
    return tuple(path)


def _line_of(path: tuple[Key, ...], lines: dict[tuple[Key, ...], int]) -> int | None:
    while path and path not in lines:
        path = path[:-1]
    return lines.get(path)


def _message(err: Any) -> str:
    if err["type"] == "extra_forbidden":
        return "unknown key"
    if err["type"] == "missing":
        return "required key is missing"
    return str(err["msg"]).removeprefix("Value error, ")


def _duplicate_ids(data: Any, lines: dict[tuple[Key, ...], int]) -> list[tuple[int | None, str]]:
    probes = data.get("probes") if isinstance(data, dict) else None
    found: list[tuple[int | None, str]] = []
    first: dict[str, int] = {}
    for i, probe in enumerate(probes if isinstance(probes, list) else []):
        pid = probe.get("id") if isinstance(probe, dict) else None
        if not isinstance(pid, str):
            continue
        if pid in first:
            where = _line_of(("probes", i, "id"), lines)
            found.append(
                (
                    where,
                    f"probes[{i}].id: duplicate probe id {pid!r} (first at probes[{first[pid]}])",
                )
            )
        first.setdefault(pid, i)
    return found


def _has_inner_error(loc: tuple[Key, ...], errors: Sequence[Any]) -> bool:
    n = len(loc)
    return any(len(e["loc"]) > n and tuple(e["loc"][:n]) == tuple(loc) for e in errors)


def parse_suite(text: str, source: str) -> Suite:
    """Validate suite YAML text; `source` names it in errors (a path, or `<default>`)."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{source}:{mark.line + 1}" if mark is not None else source
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        if "python/" in str(problem) or "python/" in str(exc):
            problem = f"python tags are not allowed in a suite ({problem})"
        raise SuiteError(f"{where}: invalid YAML: {problem}") from None
    lines, duplicate_keys = _line_map(text)
    if not isinstance(data, dict):
        raise SuiteError(f"{source}: a suite is a mapping with name, version and probes")
    located = list(duplicate_keys)
    located += _duplicate_ids(data, lines)
    try:
        suite = Suite.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors()
        for err in errors:
            if err["type"] == "too_short" and _has_inner_error(err["loc"], errors):
                continue  # "0 items after validation" only repeats that its items were invalid
            path = _data_path(err["loc"], data)
            if err["type"] in _TAG_ERRORS:
                path = (*path, "type")
            message = _message(err)
            if located and message.startswith("duplicate probe id"):
                continue
            located.append((_line_of(path, lines), f"{_dotted(path)}: {message}"))
        suite = None
    if located:
        raise SuiteError(
            "\n".join(
                f"{source}:{line}: {msg}" if line else f"{source}: {msg}" for line, msg in located
            )
        )
    assert suite is not None
    return suite


def load_suite(path: Path) -> Suite:
    """Read and validate a suite file."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SuiteError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise SuiteError(f"{path}: not UTF-8 text: {exc.reason}") from None
    return parse_suite(text, str(path))


DEFAULT_SOURCE = "servegate/probes/suites/default.yaml"


def _default_text() -> str:
    resource = resources.files("servegate.probes") / "suites" / "default.yaml"
    return resource.read_text(encoding="utf-8")


def default_suite() -> Suite:
    """The suite shipped in the package (`probes/suites/default.yaml`)."""
    return parse_suite(_default_text(), DEFAULT_SOURCE)


def suite_identity(path: Path | None) -> str:
    """Name, version and a hash of the suite file's text (the shipped default when None): a
    resumed run or a stored baseline must ask the very same probes."""
    suite = load_suite(path) if path is not None else default_suite()
    text = path.read_text(encoding="utf-8") if path is not None else _default_text()
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]
    return f"{suite.name} v{suite.version} sha256:{digest}"
