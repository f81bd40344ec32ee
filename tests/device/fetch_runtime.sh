#!/usr/bin/env bash
# Run here, before a device check: copies the check's binaries without their debug information
# into .device-bin/ (so that they fit the GPU machine's carry limit), and downloads (never installs)
# the Debian packages that provide the shared libraries they and Open MPI's mpirun need into
# .device-runtime/ (both git-ignored), so that check.sh can unpack them on the GPU machine, which
# has CUDA 13 and no package registry. CUDA's own libraries are left out: the GPU machine's are used.
#
# usage: tests/device/fetch_runtime.sh [BUILD_DIR]   (default build)
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
binaries=("$build/bin/tst_cuda_kernels" "$build/bin/meshbench-agent" "$build/bin/bench_gpu")
for b in "${binaries[@]}"; do
  [[ -x $b ]] || { echo "fetch_runtime: $b is not built; run cmake --build $build first" >&2; exit 1; }
done
rm -rf .device-bin && mkdir -p .device-bin
for b in "${binaries[@]}"; do strip --strip-debug -o ".device-bin/$(basename "$b")" "$b"; done
binaries+=("$(readlink -f "$(command -v orterun)")" "$(readlink -f "$(command -v orted)")")
packages=$(for b in "${binaries[@]}"; do ldd "$b"; done | awk '$3 ~ /^\// {print $3}' | grep -v '^/usr/local/cuda' |
  sort -u | while read -r lib; do dpkg -S "$(readlink -f "$lib")" 2>/dev/null || dpkg -S "$lib"; done |
  cut -d: -f1 | sort -u)
# glibc and the compiler runtime are on every machine; everything else travels.
packages=$(echo "$packages" | grep -v -x -E 'libc6|libgcc-s1|libstdc\+\+6|zlib1g')
# mpirun itself, its components and help files.
packages="$packages openmpi-bin openmpi-common"
rm -rf .device-runtime && mkdir -p .device-runtime
(cd .device-runtime && apt-get download $packages >/dev/null)
echo "fetch_runtime: $(ls .device-runtime | wc -l) packages, $(du -sh .device-runtime | cut -f1), in .device-runtime/;" \
  "binaries $(du -sh .device-bin | cut -f1) in .device-bin/"
