#!/usr/bin/env bash
# The main job: set up, build, plan the demo job and search layouts for GPT-3 175B on 1,024 H100s.
set -euo pipefail
cd "$(dirname "$0")/.."

packaging/build.sh
echo
build/bin/meshbench-engine plan resources/jobs/demo.json
echo
build/bin/meshbench-engine search resources/jobs/gpt3-175b.json --top 10
