"""The progress line's ETA on a log (CI): from the gate's pace so far."""

import pytest

from servegate.cli.console import eta


@pytest.mark.parametrize(
    ("elapsed_s", "done", "total", "shown"),
    [
        (10.0, 1, 10, "  (ETA 1m 30s)"),
        (10.0, 5, 10, "  (ETA 10s)"),
        (0.0, 0, 5, ""),
        (3.0, 3, 3, ""),
    ],
    ids=["minutes", "seconds", "nothing-done-yet", "finished"],
)
def test_the_eta_is_the_pace_so_far_times_what_is_left(
    elapsed_s: float, done: int, total: int, shown: str
) -> None:
    assert eta(elapsed_s, done, total) == shown
