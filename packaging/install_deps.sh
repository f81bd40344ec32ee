#!/usr/bin/env bash
# Installs the Debian 12 packages Meshbench builds and tests with, skipping those already present.
# Run as root or through sudo. CUDA is optional and is picked up from /usr/local/cuda when present.
# python3-torch is for the tests only: they check that PyTorch reproduces our training losses.
# python3-zmq is the Python client's (agent/python/meshbench) one dependency, and its test's.
# clang and libclang-rt-dev (libFuzzer) are for the tests only: the wire decoder's fuzz target.
# clang-format is for the tests only: tst_format holds the tree to .clang-format; clang-tidy is
# packaging/lint.sh's.
# iproute2 and util-linux are for the tests only: the test hosts (network namespaces, unshare).
# dpkg-dev and lintian are for packaging/build_deb.sh and its test: CPack's dependency scan, and the
# package's check. help2man writes the man pages from each program's --help at build time.
# desktop-file-utils and appstream are for the packaging test only: it validates the installed desktop
# entry and AppStream metadata.
# slurmctld, slurmd, slurm-client and munge are for the tests only: a single-node Slurm that the
# tests start under the build folder (tests/slurm/slurm_cluster.sh); the services Debian enables for
# them are disabled again, since they would start without a configuration.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git
  qt6-base-dev qt6-base-dev-tools libgl-dev
  libqcustomplot-dev libqcustomplot2.1-qt6
  libzmq3-dev cppzmq-dev
  openmpi-bin libopenmpi-dev
  libsqlite3-dev sqlite3
  nlohmann-json3-dev libcli11-dev
  rapidjson-dev zlib1g-dev libxxhash-dev
  libopenblas-dev
  xvfb xauth
  python3-torch python3-numpy python3-zmq
  clang libclang-rt-dev clang-format clang-tidy
  iproute2 util-linux
  slurmctld slurmd slurm-client munge
  dpkg-dev lintian help2man
  desktop-file-utils appstream
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
  for service in slurmctld slurmd; do
    if [[ " ${missing[*]} " == *" $service "* ]] && command -v systemctl > /dev/null; then
      "${sudo_cmd[@]}" systemctl disable --now "$service" > /dev/null 2>&1 || true
    fi
  done
fi
