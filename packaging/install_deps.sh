#!/usr/bin/env bash
# Installs the Debian 12 packages Meshbench builds and tests with, skipping those already present.
# Run as root or through sudo. CUDA is optional and is picked up from /usr/local/cuda when present.
# python3-torch is for the tests only: they check that PyTorch reproduces our training losses.
# clang and libclang-rt-dev (libFuzzer) are for the tests only: the wire decoder's fuzz target.
# iproute2 and util-linux are for the tests only: the test hosts (network namespaces, unshare).
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git
  qt6-base-dev qt6-base-dev-tools libgl-dev
  libqcustomplot-dev libqcustomplot2.1-qt6
  libzmq3-dev cppzmq-dev
  openmpi-bin libopenmpi-dev
  libsqlite3-dev sqlite3
  nlohmann-json3-dev
  libopenblas-dev
  xvfb xauth
  python3-torch python3-numpy
  clang libclang-rt-dev
  iproute2 util-linux
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ "${#missing[@]}" -gt 0 ]; then
  echo "meshbench: installing ${missing[*]}"
  sudo_cmd=()
  [ "$(id -u)" -ne 0 ] && sudo_cmd=(sudo)
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
