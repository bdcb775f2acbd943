#!/usr/bin/env bash
# libturbojpeg and pkg-config for the `libjpeg-turbo` feature (JPEGs decoded as Pillow decodes
# them), from Debian's `libturbojpeg0-dev`, where they are missing. Needs root (or sudo) and apt.
set -euo pipefail
if command -v pkg-config >/dev/null && pkg-config --exists libturbojpeg; then
    exit 0
fi
command -v apt-get >/dev/null || exit 1
sudo=""
[ "$(id -u)" = 0 ] || sudo="sudo"
$sudo apt-get update -q
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends libturbojpeg0-dev pkg-config
pkg-config --exists libturbojpeg
