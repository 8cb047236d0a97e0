"""The Prometheus text exposition format (what a server's `/metrics` answers), parsed strictly
enough to trust a number and leniently enough that one odd line does not hide the others.

A sample line is `name{label="value",…} value [timestamp]`; `#` lines (HELP, TYPE, comments,
OpenMetrics' `# EOF`) and blank lines carry no sample. Label values may escape `\\`, `\"` and
`\n`. Values are Go floats: `NaN`, `+Inf`, `-Inf` included. An OpenMetrics exemplar after the
value (` # {trace_id="…"} 1.0`) is ignored. A line that does not parse is counted, never guessed.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

__all__ = ["Exposition", "MetricSample", "parse_exposition"]

_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_ESCAPES = {"\\": "\\", '"': '"', "n": "\n"}


@dataclass(frozen=True, slots=True)
class MetricSample:
    """One sample: its metric name, its labels (sorted) and its value."""

    name: str
    labels: tuple[tuple[str, str], ...]
    value: float


@dataclass(frozen=True, slots=True)
class Exposition:
    """Every sample of one scrape, and the 1-based numbers of the lines that did not parse."""

    samples: tuple[MetricSample, ...]
    bad_lines: tuple[int, ...] = ()

    def values(self, name: str) -> tuple[float, ...]:
        """The finite values of every series of `name` (one per label set)."""
        return tuple(s.value for s in self.samples if s.name == name and math.isfinite(s.value))


class _BadLine(ValueError):
    pass


def _labels(line: str, at: int) -> tuple[tuple[tuple[str, str], ...], int]:
    """Parse `{a="x",b="y"}` starting at the `{`; return the labels and the index after `}`."""
    labels: list[tuple[str, str]] = []
    i = at + 1
    while True:
        while i < len(line) and line[i] in " \t":
            i += 1
        if i < len(line) and line[i] == "}":
            return tuple(sorted(labels)), i + 1
        name = _LABEL_NAME.match(line, i)
        if name is None:
            raise _BadLine("label name")
        i = name.end()
        while i < len(line) and line[i] in " \t":
            i += 1
        if line[i : i + 1] != "=":
            raise _BadLine("label value")
        i += 1
        while i < len(line) and line[i] in " \t":
            i += 1
        if line[i : i + 1] != '"':
            raise _BadLine("label value")
        i += 1
        value: list[str] = []
        while True:
            if i >= len(line):
                raise _BadLine("unterminated label value")
            ch = line[i]
            if ch == "\\":
                if i + 1 >= len(line) or line[i + 1] not in _ESCAPES:
                    raise _BadLine("bad escape")
                value.append(_ESCAPES[line[i + 1]])
                i += 2
            elif ch == '"':
                i += 1
                break
            else:
                value.append(ch)
                i += 1
        labels.append((name.group(), "".join(value)))
        while i < len(line) and line[i] in " \t":
            i += 1
        if i < len(line) and line[i] == ",":
            i += 1
        elif i >= len(line) or line[i] != "}":
            raise _BadLine("expected , or }")


def _value(text: str) -> float:
    special = {"nan": math.nan, "+inf": math.inf, "inf": math.inf, "-inf": -math.inf}
    lowered = text.lower()
    if lowered in special:
        return special[lowered]
    if not re.fullmatch(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?", text):
        raise _BadLine("value")
    return float(text)


def _sample(line: str) -> MetricSample:
    name = _NAME.match(line)
    if name is None:
        raise _BadLine("metric name")
    labels: tuple[tuple[str, str], ...] = ()
    i = name.end()
    if i < len(line) and line[i] == "{":
        labels, i = _labels(line, i)
    rest = line[i:]
    if rest[:1] not in (" ", "\t"):
        raise _BadLine("no value")
    fields = rest.split("#", 1)[0].split()
    if not 1 <= len(fields) <= 2:
        raise _BadLine("value and timestamp")
    return MetricSample(name.group(), labels, _value(fields[0]))


def parse_exposition(text: str) -> Exposition:
    """Every sample in `text`, in order; lines that do not parse are listed by number."""
    samples: list[MetricSample] = []
    bad: list[int] = []
    for number, raw in enumerate(text.split("\n"), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        try:
            samples.append(_sample(line))
        except (_BadLine, IndexError):
            bad.append(number)
    return Exposition(tuple(samples), tuple(bad))
