#!/usr/bin/env bash
# Builds the Debian package meshbench_VERSION_amd64.deb from the build folder (build/ by default),
# prints its path, and checks it with lintian: errors fail, warnings are shown.
#   packaging/build_deb.sh [--build-dir DIR] [--no-build]
# --no-build packs the binaries already built (the packaging test does, after the full build).
set -euo pipefail
cd "$(dirname "$0")/.."

build_dir=build
build=1
while [ $# -gt 0 ]; do
  case "$1" in
    --build-dir) build_dir="$2"; shift 2 ;;
    --no-build) build=0; shift ;;
    *) echo "usage: packaging/build_deb.sh [--build-dir DIR] [--no-build]" >&2; exit 2 ;;
  esac
done

if [ "$build" -eq 1 ]; then
  packaging/install_deps.sh
  if [ ! -f "$build_dir/CMakeCache.txt" ]; then
    generator=()
    command -v ninja >/dev/null && generator=(-G Ninja)
    cmake -S . -B "$build_dir" "${generator[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo
  fi
  # Only what the package holds, not the tests.
  cmake --build "$build_dir" --parallel "$(nproc)" \
    --target meshbench meshbench-engine meshbench-agent meshbench_package_docs
fi
for tool in dpkg-shlibdeps lintian; do
  command -v "$tool" >/dev/null || { echo "build_deb.sh: $tool is missing (packaging/install_deps.sh installs it)" >&2; exit 1; }
done

out="$build_dir/deb"
rm -f "$out"/meshbench_*.deb
# CPack installs the build under /usr into its staging folder (stripped), and dpkg-shlibdeps finds
# the Debian packages of the libraries the binaries link.
cpack --config "$build_dir/CPackConfig.cmake" -G DEB -B "$out" > "$out.log" 2>&1 || {
  cat "$out.log" >&2
  echo "build_deb.sh: cpack failed" >&2
  exit 1
}
debs=("$out"/meshbench_*_amd64.deb)
[ -f "${debs[0]}" ] || { cat "$out.log" >&2; echo "build_deb.sh: cpack made no package in $out" >&2; exit 1; }
deb="$(realpath "${debs[0]}")"
echo "$deb"

# lintian prints every error and warning; only errors fail.
lintian --fail-on error "$deb"
