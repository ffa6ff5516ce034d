#!/bin/sh
# The browser test's browser: Debian's chromium (Playwright's own download cannot work offline)
# and Playwright's Python package to drive it. Run by the test set-up on a fresh machine; a no-op
# when both are there. Needs root (or sudo) for apt-get.
set -eu
VENV_PY="${1:-.venv/bin/python}"
if ! command -v chromium >/dev/null 2>&1; then
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null
fi
"$VENV_PY" -c "import playwright" 2>/dev/null || "$VENV_PY" -m pip install -q "playwright>=1.45"
chromium --version
