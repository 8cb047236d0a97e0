"""The top of every report: what changed between the two sides' fingerprints, and how each
engine servegate launched came up. Plain rows; each format escapes them its own way."""

from __future__ import annotations

from servegate.verdict.changes import Change, what_changed
from servegate.verdict.model import LaunchRecord, Report


def changes(report: Report) -> tuple[list[Change], int]:
    """Differing fingerprint fields and how many fields were compared."""
    return what_changed(report.baseline, report.candidate)


def _num(value: float | None, unit: str) -> str:
    return "-" if value is None else f"{value:g} {unit}"


def launch_line(side: str, record: LaunchRecord) -> str:
    """One line: outcome, load and ready time, peak memory, log file."""
    gpu = (
        _num(record.gpu_memory_mb, "MiB")
        if record.gpu_memory_mb is not None
        else (record.gpu_note or "not measured")
    )
    return (
        f"{side}: {record.outcome} — load {_num(record.load_s, 's')}, "
        f"ready {_num(record.ready_s, 's')} (from process start), "
        f"peak RSS {_num(record.peak_rss_mb, 'MiB')}, GPU memory {gpu}; log {record.log_path}"
    )


def launch_lines(report: Report) -> list[str]:
    """A line per side servegate launched (none for endpoints it was given)."""
    sides = (("baseline", report.baseline.launch), ("candidate", report.candidate.launch))
    return [launch_line(side, rec) for side, rec in sides if rec is not None]


def summary(compared: int, changed: int) -> str:
    if compared == 0:
        return "no fingerprint fields were recorded"
    if changed == 0:
        return f"nothing: the {compared} recorded fingerprint fields are equal"
    return f"{changed} of {compared} recorded fingerprint fields differ"
