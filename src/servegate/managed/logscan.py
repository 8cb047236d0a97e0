"""The start-up log scan: a catalogue of patterns (shipped as data, extendable by a user file)
matched line by line against a managed engine's log."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from functools import cached_property
from importlib import resources
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator

from servegate.config.loader import ConfigError, read_yaml, validate
from servegate.managed.launch_evidence import LogHit
from servegate.verdict.model import Severity

LogClass = Literal[
    "fallback",
    "unsupported-operator",
    "kernel-not-found",
    "deprecated-flag",
    "traceback",
    "optional-dependency",
    "dtype-cast",
]
SHIPPED = "log_patterns.yaml"
# A log that repeats one warning per layer would otherwise flood the report.
MAX_HITS_PER_PATTERN = 3
MAX_LINE_CHARS = 400


class LogPattern(BaseModel):
    """One catalogue entry: a regular expression (case-insensitive, searched in each line)."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    id: str = Field(min_length=1)
    kind: LogClass = Field(alias="class")
    severity: Severity = Severity.MAJOR
    regex: str

    @field_validator("regex")
    @classmethod
    def _compiles(cls, value: str) -> str:
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"not a regular expression: {exc}") from None
        return value

    @cached_property
    def compiled(self) -> re.Pattern[str]:
        return re.compile(self.regex, re.IGNORECASE)


class Catalogue(BaseModel):
    """The patterns of one file."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    patterns: tuple[LogPattern, ...]


def load_catalogue(user_file: Path | None = None) -> tuple[LogPattern, ...]:
    """The shipped patterns, then the user's: a user pattern with a shipped id replaces it."""
    text = resources.files("servegate.managed").joinpath(SHIPPED).read_text(encoding="utf-8")
    shipped = validate(Catalogue, yaml.safe_load(text), f"servegate/managed/{SHIPPED}")
    merged = {p.id: p for p in shipped.patterns}
    if user_file is not None:
        data = read_yaml(user_file)
        if not isinstance(data, dict):
            raise ConfigError(f"{user_file}: expected a mapping with a 'patterns' list")
        merged.update({p.id: p for p in validate(Catalogue, data, str(user_file)).patterns})
    return tuple(merged.values())


# vLLM's processes prefix each line: "(EngineCore pid=12) ERROR 12-02 04:47:43 [core.py:1510] ".
_PROCESS_PREFIX = re.compile(r"^\(\S+ pid=\d+\) [A-Z]+ [\d-]+ [\d:]+ \[[^\]]+\] ")


def unprefixed(line: str) -> str:
    """A log line without vLLM's process prefix (other lines unchanged)."""
    return _PROCESS_PREFIX.sub("", line, count=1)


def _traceback_end(lines: Sequence[str], start: int) -> str | None:
    # The exception line ends a traceback: the first unindented line after its header.
    for raw in lines[start + 1 : start + 200]:
        line = unprefixed(raw)
        if line and not line[0].isspace():
            return line.strip()
    return None


def scan(lines: Iterable[str], patterns: Sequence[LogPattern]) -> tuple[LogHit, ...]:
    """Every line matching a pattern, in log order, at most MAX_HITS_PER_PATTERN per pattern."""
    text = list(lines)
    counts: dict[str, int] = {}
    hits: list[LogHit] = []
    for index, raw in enumerate(text):
        line = raw.rstrip("\n")
        for p in patterns:
            match = p.compiled.search(line)
            if match is None or counts.get(p.id, 0) >= MAX_HITS_PER_PATTERN:
                continue
            counts[p.id] = counts.get(p.id, 0) + 1
            shown = line.strip()
            if p.kind == "traceback":
                end = _traceback_end(text, index)
                shown = f"{shown} … {end}" if end else shown
            module = match.groupdict().get("module")
            hits.append(
                LogHit(
                    pattern=p.id,
                    kind=p.kind,
                    severity=p.severity,
                    line_no=index + 1,
                    line=shown[:MAX_LINE_CHARS],
                    module=module,
                )
            )
    return tuple(hits)


def scan_file(
    path: Path, patterns: Sequence[LogPattern], max_bytes: int = 4_000_000
) -> tuple[LogHit, ...]:
    """`scan` over the first `max_bytes` of a log file (a missing file has no hits)."""
    try:
        with path.open("rb") as fh:
            data = fh.read(max_bytes)
    except OSError:
        return ()
    return scan(data.decode("utf-8", "replace").splitlines(), patterns)
