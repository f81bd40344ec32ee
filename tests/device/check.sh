#!/usr/bin/env bash
# The device check, run on the GPU machine (see the README's "On GPUs"): the CUDA kernels against
# the CPU's (tests/kernels/tst_cuda_kernels). Needs the build's binaries and .device-runtime/ (from
# fetch_runtime.sh) carried; unpacks the packages into a private prefix, never into /, and uses
# the machine's own CUDA 13 libraries. Results go to OUT_DIR.
#
# usage: tests/device/check.sh OUT_DIR [BUILD_DIR]   (default build)
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:?usage: check.sh OUT_DIR [BUILD_DIR]}
build=${2:-build}
mkdir -p "$out"
prefix=$(mktemp -d /tmp/meshbench-runtime.XXXXXX)
for deb in .device-runtime/*.deb; do dpkg -x "$deb" "$prefix"; done
export LD_LIBRARY_PATH="$prefix/usr/lib/x86_64-linux-gnu:$prefix/usr/lib/x86_64-linux-gnu/openblas-pthread:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export OPENBLAS_NUM_THREADS=1 QT_QPA_PLATFORM=offscreen

{
  echo "== device"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>&1 || echo "no nvidia-smi"
  echo "== backend auto"
  "$build/bin/meshbench-agent" --help >/dev/null && echo "the agent starts"
} > "$out/device.txt" 2>&1

status=0
"$build/bin/tst_cuda_kernels" -o "$out/cuda_kernels.txt,txt" -o -,txt > "$out/cuda_kernels.log" 2>&1 || status=$?
grep -E '^(Totals|FAIL|SKIP)' "$out/cuda_kernels.txt" | head -40
echo "check: tst_cuda_kernels exited $status; results in $out"
exit "$status"
