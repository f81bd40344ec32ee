#!/usr/bin/env bash
# Set up, build, and run every test suite with CTest.
set -euo pipefail
cd "$(dirname "$0")/.."

packaging/build.sh
ctest --test-dir build --output-on-failure --parallel "$(nproc)" --timeout 600
