#!/usr/bin/env bash
# Headless Chromium for the report's browser test (crates/benchctl/tests/report.rs), from
# Debian's `chromium` package, where it is missing. Needs root (or sudo) and apt.
set -euo pipefail
if command -v chromium >/dev/null || command -v chromium-browser >/dev/null || command -v google-chrome >/dev/null; then
    exit 0
fi
sudo=""
[ "$(id -u)" = 0 ] || sudo="sudo"
$sudo apt-get update -q
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends chromium
