#!/usr/bin/env bash
# The main job: set up and build, plan the demo job, search layouts for GPT-3 175B on 1,024 H100s,
# then train the demo model on this machine's CPU (one device; ~1.5 minutes).
set -euo pipefail
cd "$(dirname "$0")/.."

packaging/build.sh
echo
build/bin/meshbench-engine plan resources/jobs/demo.json
echo
build/bin/meshbench-engine search resources/jobs/gpt3-175b.json --top 10
echo
build/bin/meshbench-agent --job resources/jobs/demo.json
