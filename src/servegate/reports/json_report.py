"""The JSON report: the contract every other rendering is made from. Written atomically."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from pydantic_core import PydanticSerializationError

from servegate.verdict.model import Report


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
    """The report as JSON text. A lone surrogate in server text (valid in a JSON escape, not in
    UTF-8) becomes U+FFFD instead of failing the whole report."""
    try:
        return report.model_dump_json(indent=2)
    except PydanticSerializationError:
        text = json.dumps(report.model_dump(mode="json"), indent=2, ensure_ascii=False)
        return text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")


def write_json(report: Report, path: Path) -> None:
    write_atomic(path, dump_report(report) + "\n")
