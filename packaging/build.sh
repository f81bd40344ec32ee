#!/usr/bin/env bash
# Installs missing Debian packages, then configures and builds Meshbench into build/: everything,
# or only the named targets (packaging/build.sh meshbench meshbench-engine).
#
#   packaging/build.sh [TARGET...]
set -euo pipefail
cd "$(dirname "$0")/.."

packaging/install_deps.sh

generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
# Keep the generator of an existing build folder.
[ -f build/CMakeCache.txt ] && generator=()
cmake -S . -B build "${generator[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo
targets=()
[ $# -gt 0 ] && targets=(--target "$@")
cmake --build build --parallel "$(nproc)" "${targets[@]}"
