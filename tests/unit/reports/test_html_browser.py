"""The HTML report in a real headless Chromium: model output executes nothing (FAULTS 49).

The hostile report carries `<script>`, `<img onerror>`, `javascript:` links and `</script>` in
model output, tool arguments, error text and the model name. Each payload would set the page's
title to "pwned". The page is opened twice: as written, and with its Content-Security-Policy
removed — so the test proves the escaping itself, not only the CSP. A control page with one
payload (an image's onerror) left unescaped shows that this browser really runs such a payload
and that the marker reads it.

Under the project's test command (scripts/test.sh sets SERVEGATE_REQUIRE_BROWSER) a missing
Chromium fails the test; `bash scripts/chromium.sh` installs it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from servegate.reports.html import CSP, render_html
from servegate.verdict.model import Report

pytestmark = pytest.mark.slow

TITLE = "servegate FAIL: run 0123456789ab"


def _chromium() -> str:
    found = os.environ.get("SERVEGATE_CHROMIUM") or next(
        (p for n in ("chromium", "chromium-browser", "google-chrome") if (p := shutil.which(n))),
        None,
    )
    if found:
        return found
    if any(os.environ.get(v) for v in ("SERVEGATE_REQUIRE_BROWSER", "CI")):
        pytest.fail("headless Chromium not installed (bash scripts/chromium.sh)")
    pytest.skip("headless Chromium not installed (bash scripts/chromium.sh)")


def _dom(page: Path, profile: Path) -> str:
    """The DOM after the page ran for two seconds of virtual time (image errors included)."""
    command = [
        _chromium(), "--headless", "--no-sandbox", "--disable-gpu",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        "--no-first-run", "--disable-dev-shm-usage", f"--user-data-dir={profile}",
        "--virtual-time-budget=2000", "--dump-dom", page.as_uri(),
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=90, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


class _Title(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.inside = False
        self.title = ""
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        self.inside = tag == "title" and not self.title  # the page's, not an SVG tooltip

    def handle_endtag(self, tag: str) -> None:
        self.inside = False

    def handle_data(self, data: str) -> None:
        if self.inside:
            self.title += data


def _read(dom: str) -> _Title:
    parser = _Title()
    parser.feed(dom)
    return parser


def test_nothing_from_model_output_executes_in_a_real_browser(
    failing_report: Report, tmp_path: Path
) -> None:
    page = render_html(failing_report)
    without_csp = page.replace(f'<meta http-equiv="Content-Security-Policy" content="{CSP}">', "")
    assert without_csp != page
    # The control page's payload fires from an image error event: asynchronous, the latest kind.
    payload = "<img src=x onerror=\"document.title='pwned'\">"
    control = without_csp.replace("</body>", f"{payload}</body>")
    files = {"report": page, "no-csp": without_csp, "control": control}
    for name, html in files.items():
        (tmp_path / f"{name}.html").write_text(html, encoding="utf-8")

    doms = {name: _dom(tmp_path / f"{name}.html", tmp_path / f"profile-{name}") for name in files}

    assert _read(doms["control"]).title == "pwned"  # the marker works in this browser
    for name in ("report", "no-csp"):
        seen = _read(doms[name])
        assert seen.title == TITLE, name
        assert "pwned" not in seen.title
        assert not [t for t, _ in seen.tags if t in ("img", "iframe", "object", "embed")]
        assert not [k for _, a in seen.tags for k in a if k.startswith("on")]
        assert all((a.get("href") or "#").startswith("#") for t, a in seen.tags if t == "a")
        scripts = [a for t, a in seen.tags if t == "script"]
        assert scripts == [{"type": "application/json", "id": "servegate-report"}]
        # The payloads are on the page as text a person can read.
        assert "&lt;script&gt;document.title='pwned'" in doms[name]
        assert "&lt;img src=x onerror=" in doms[name]
