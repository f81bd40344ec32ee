#!/usr/bin/env bash
# Run here, before a device check: downloads (never installs) the Debian packages that provide the
# shared libraries the device check's binaries need, into .device-runtime/ (git-ignored), so that
# check.sh can unpack them on the GPU machine, which has CUDA 13 and no package registry. CUDA's
# own libraries are left out: the GPU machine's are used.
#
# usage: tests/device/fetch_runtime.sh [BUILD_DIR]   (default build)
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
binaries=("$build/bin/tst_cuda_kernels" "$build/bin/meshbench-agent")
for b in "${binaries[@]}"; do
  [[ -x $b ]] || { echo "fetch_runtime: $b is not built; run cmake --build $build first" >&2; exit 1; }
done
packages=$(for b in "${binaries[@]}"; do ldd "$b"; done | awk '$3 ~ /^\// {print $3}' | grep -v '^/usr/local/cuda' |
  sort -u | while read -r lib; do dpkg -S "$(readlink -f "$lib")" 2>/dev/null || dpkg -S "$lib"; done |
  cut -d: -f1 | sort -u)
# glibc and the compiler runtime are on every machine; everything else travels.
packages=$(echo "$packages" | grep -v -x -E 'libc6|libgcc-s1|libstdc\+\+6|zlib1g')
rm -rf .device-runtime && mkdir -p .device-runtime
(cd .device-runtime && apt-get download $packages >/dev/null)
echo "fetch_runtime: $(ls .device-runtime | wc -l) packages, $(du -sh .device-runtime | cut -f1), in .device-runtime/"
