#!/bin/sh
# The README's "Observe a PyTorch run" example as a user runs it: meshbench-engine run on
# docs/examples/observed_dp.json completes, with every step stored and no record lost.
# Usage: run_observed_example.sh MESHBENCH_ENGINE SOURCE_DIR
set -eu
engine=$1
source=$2
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
if ! /usr/bin/python3 -c 'import torch, zmq' 2>/dev/null; then
  echo "SKIP: the example needs Debian's python3-torch and python3-zmq"
  exit 77
fi
if ! "$engine" run "$source/docs/examples/observed_dp.json" --session "$out/observed.meshbench" >"$out/log" 2>&1; then
  cat "$out/log"
  exit 1
fi
cat "$out/log"
grep -q '^completed' "$out/log"
grep -q '^steps 20, final loss' "$out/log"
grep -q '^records [0-9]* stored, 0 lost' "$out/log"
