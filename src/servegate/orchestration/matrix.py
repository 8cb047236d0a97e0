"""`servegate matrix FILE`: the gates once per execution path, against one shared baseline.

Entries run one after another (they share the baseline, whose answers must not depend on
another entry's load). Each entry is an ordinary recorded run, named `matrix ENTRY`; an entry
that cannot be compared at all (unreachable, refused) gets its one-line reason in its row and
the next entry still runs. With `--ray`, orchestration/ray_matrix.py runs the entries as tasks
of a Ray cluster instead, and gives the same rows. A baseline `launch` block is started by each
entry's run, unless the file says `shared: node`: then it is started once for the whole local
run (one machine, one node; orchestration/shared_baseline.py) and stopped when the last entry
ends.
"""

from __future__ import annotations

import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine

from servegate.config.matrix import MatrixEntry, MatrixFile
from servegate.orchestration.runner import GATES, GateRunner, PreflightError, ProgressFn, run
from servegate.orchestration.shared_baseline import SharedBaseline, launch_shared
from servegate.verdict.model import Report, Status
from servegate.verdict.rules import EXIT_FAIL, EXIT_INCONCLUSIVE, EXIT_PASS, EXIT_USAGE


@dataclass(frozen=True)
class MatrixRow:
    entry: MatrixEntry
    report: Report | None  # None when the entry could not be compared
    error: str | None
    exit_code: int
    node: str | None = None  # with --ray: the host that ran it
    seconds: float | None = None  # with --ray: the entry's time on its node
    baseline: Mapping[str, Any] | None = None  # a shared baseline: its node, URL, pid

    def status(self, gate: str) -> Status | None:
        if self.report is None:
            return None
        found = [g.status for g in self.report.gates if g.name == gate]
        return found[0] if found else None


async def run_matrix(
    matrix: MatrixFile,
    *,
    source: str,
    store: Engine | None,
    stored_url: str | None = None,
    progress: ProgressFn | None = None,
    gates: Mapping[str, GateRunner] = GATES,
) -> list[MatrixRow]:
    """Run every entry's gates; a row per entry, in the file's order."""
    if not matrix.shared_per_node:
        return await _entries(matrix, source=source, store=store, stored_url=stored_url,
                              progress=progress, gates=gates, shared=None)  # fmt: skip
    first = matrix.config(matrix.entries[0], source, stored_url)
    async with launch_shared(matrix, first, node=socket.gethostname(), label="local") as shared:
        return await _entries(matrix, source=source, store=store, stored_url=stored_url,
                              progress=progress, gates=gates, shared=shared)  # fmt: skip


async def _entries(
    matrix: MatrixFile,
    *,
    source: str,
    store: Engine | None,
    stored_url: str | None,
    progress: ProgressFn | None,
    gates: Mapping[str, GateRunner],
    shared: SharedBaseline | None,
) -> list[MatrixRow]:
    given = {} if shared is None else {"baseline": shared.managed}
    info = None if shared is None else shared.info()
    rows: list[MatrixRow] = []
    for entry in matrix.entries:
        cfg = matrix.config(entry, source, stored_url)
        try:
            report = await run(cfg, store=store, run_name=f"matrix {entry.name}",
                               progress=progress, gates=gates, shared=given)  # fmt: skip
        except PreflightError as exc:
            rows.append(MatrixRow(entry, None, str(exc), exc.exit_code, baseline=info))
            continue
        rows.append(MatrixRow(entry, report, None, report.exit_code, baseline=info))
    return rows


def matrix_exit_code(rows: Sequence[MatrixRow]) -> int:
    """1 when any entry failed (a regression matters most), else 2 when one could not be run as
    configured, else 3 when one was inconclusive, else 0."""
    codes = {r.exit_code for r in rows}
    for code in (EXIT_FAIL, EXIT_USAGE, EXIT_INCONCLUSIVE):
        if code in codes:
            return code
    return EXIT_PASS if codes <= {EXIT_PASS} else EXIT_INCONCLUSIVE
