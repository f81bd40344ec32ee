#!/usr/bin/env bash
# The main job: set up and build, plan the demo job, search layouts for GPT-3 175B on 1,024 H100s,
# then train the demo through meshbench-engine run: dp2 x pp2 x tp2 x ep2 on 8 ranks under Open MPI
# (about 75 s on 2 cores), ending with a summary and the session file's path.
set -euo pipefail
cd "$(dirname "$0")/.."

# The three programs only: the test suites are packaging/run_tests.sh's to build.
packaging/build.sh meshbench meshbench-engine meshbench-agent
echo
build/bin/meshbench-engine plan resources/jobs/demo.json
echo
build/bin/meshbench-engine search resources/jobs/gpt3-175b.json --top 10
echo
# With a display, the workbench opens with the demo job ready to launch (Run > Launch, Ctrl+R).
if [ -n "${DISPLAY:-}${WAYLAND_DISPLAY:-}" ]; then
  exec build/bin/meshbench resources/jobs/demo.json
fi
# Headless: the engine runs the demo, stores the session and prints a summary.
if [ "$(id -u)" -eq 0 ]; then
  # Open MPI refuses to start ranks as root; the same global batch then trains in one agent.
  echo "(running as root: mpirun refuses root, so the demo trains in one agent; run as a user for 8 ranks)"
  build/bin/meshbench-engine run resources/jobs/demo.json --one-device
else
  build/bin/meshbench-engine run resources/jobs/demo.json
fi
