"""What changed between two fingerprints."""

from __future__ import annotations

from servegate.verdict.changes import Change, what_changed
from servegate.verdict.model import Fingerprint, LaunchRecord


def _launch(command: str) -> LaunchRecord:
    return LaunchRecord(command=command, log_path="x.log", outcome="ready", message="ready")


def test_only_differing_fields_are_listed_and_the_url_is_not_one() -> None:
    b = Fingerprint(url="http://127.0.0.1:1/v1", model="m", version="0.25.0",
                    matrix={"attention": "flashinfer", "tp": "1"},
                    environment={"python.torch": "2.13.0", "gpu.driver": "570.1"},
                    launch=_launch("vllm serve m"))  # fmt: skip
    c = Fingerprint(url="http://127.0.0.1:2/v1", model="m", version="0.25.1",
                    matrix={"attention": "flashinfer", "tp": "1"},
                    environment={"python.torch": "2.13.0", "python.flashinfer": "0.5"},
                    launch=_launch("vllm serve m"))  # fmt: skip
    changes, compared = what_changed(b, c)
    assert changes == [
        Change("gpu.driver", "570.1", "-"),
        Change("python.flashinfer", "-", "0.5"),
        Change("server.version", "0.25.0", "0.25.1"),
    ]
    assert compared == 8


def test_identical_fingerprints_change_nothing() -> None:
    fp = Fingerprint(url="http://a/v1", model="m", matrix={"quant": "Q4_1"})
    assert what_changed(fp, fp.model_copy(update={"url": "http://b/v1"})) == ([], 2)
