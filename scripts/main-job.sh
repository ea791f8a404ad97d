#!/bin/bash
# The main job: install dependencies, build, start smcd unprivileged in a private
# runtime directory, run sockperf over smcd and over TCP, print the comparison table,
# stop smcd cleanly.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
[ -f build/build.ninja ] || meson setup build
ninja -C build
exec ./bench/main-job build
