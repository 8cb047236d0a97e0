"""The JSON report: the contract every other rendering is made from. Written atomically."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from servegate.verdict.model import Report, safe_json


def write_atomic(path: Path, text: str) -> None:
    """Temp file in the same folder, fsync, rename: a killed write leaves the old file intact."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def dump_report(report: Report) -> str:
    """The report as JSON text (lone surrogates in server text become U+FFFD)."""
    return safe_json(report, indent=2)


def write_json(report: Report, path: Path) -> None:
    write_atomic(path, dump_report(report) + "\n")
