#!/usr/bin/env bash
# Make sure a headless Chromium is installed (Debian's `chromium` package) and print its path.
# The HTML report's browser test (tests/unit/reports/test_html_browser.py) runs in it: model
# output rendered into the report must execute nothing. Safe to re-run.
set -euo pipefail
find_chromium() { command -v chromium || command -v chromium-browser || command -v google-chrome || true; }
bin=$(find_chromium)
if [ -z "$bin" ]; then
  if ! command -v apt-get >/dev/null; then
    echo "scripts/chromium.sh: no chromium and no apt-get; install Chromium and put it on PATH" >&2
    exit 1
  fi
  sudo_=""
  [ "$(id -u)" = 0 ] || sudo_="sudo"
  DEBIAN_FRONTEND=noninteractive $sudo_ apt-get install -y --no-install-recommends chromium >&2 \
    || { $sudo_ apt-get update >&2 && DEBIAN_FRONTEND=noninteractive \
         $sudo_ apt-get install -y --no-install-recommends chromium >&2; }
  bin=$(find_chromium)
fi
[ -n "$bin" ] || { echo "scripts/chromium.sh: chromium did not install" >&2; exit 1; }
"$bin" --version >&2
echo "$bin"
