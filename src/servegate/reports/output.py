"""Report files: each format rendered from the one `Report`, checked paths, atomic writes.

A path is checked before any work starts (a gate run can take half an hour): no `..` part,
not a directory, no control character in the name, an existing folder, and no two formats
writing one file. A write goes to a temp file in the same folder, is fsynced and renamed, so a
killed write leaves the previous report intact (FAULTS 41).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from servegate.reports.html import render_html
from servegate.reports.json_report import dump_report, write_atomic
from servegate.reports.junit import render_junit
from servegate.reports.markdown import render_markdown
from servegate.verdict.model import Report

Latencies = Mapping[str, Sequence[float]]

FORMATS: dict[str, Callable[[Report, Latencies | None], str]] = {
    "json": lambda report, _: dump_report(report) + "\n",
    "markdown": lambda report, _: render_markdown(report),
    "junit": lambda report, _: render_junit(report),
    "html": lambda report, latencies: render_html(report, latencies_ms=latencies),
}


class OutputPathError(Exception):
    """A report path that cannot or must not be written. Exit code 2."""

    exit_code = 2


def check_output(path: Path, label: str) -> Path:
    """`path` if a report may be written there; otherwise OutputPathError naming the problem."""
    shown = repr(str(path)) if not str(path).isprintable() else str(path)
    if not path.name or path.name in (".", ".."):
        raise OutputPathError(f"{label} {shown}: not a file name")
    if ".." in path.parts:
        raise OutputPathError(f"{label} {shown}: a report path may not climb out with '..'")
    if not path.name.isprintable():
        raise OutputPathError(f"{label} {shown}: control characters in the file name")
    if path.is_dir():
        raise OutputPathError(f"{label} {shown}: is a directory, not a file")
    folder = path.parent
    if not folder.is_dir():
        why = "is not a folder" if folder.exists() else "does not exist"
        raise OutputPathError(f"{label} {shown}: the folder {folder} {why}")
    return path


def check_outputs(outputs: Mapping[str, Path | None]) -> dict[str, Path]:
    """The requested formats and their checked paths; two formats may not share one file."""
    chosen = {fmt: check_output(path, f"--{fmt}") for fmt, path in outputs.items() if path}
    seen: dict[Path, str] = {}
    for fmt, path in chosen.items():
        key = path.resolve()
        if key in seen:
            raise OutputPathError(f"--{seen[key]} and --{fmt} name the same file {path}")
        seen[key] = fmt
    return chosen


def write_reports(
    report: Report, outputs: Mapping[str, Path], *, latencies_ms: Latencies | None = None
) -> None:
    """Render and atomically write each requested format."""
    for fmt, path in outputs.items():
        try:
            write_atomic(path, FORMATS[fmt](report, latencies_ms))
        except OSError as exc:
            raise OutputPathError(f"--{fmt} {path}: cannot write: {exc.strerror or exc}") from None
