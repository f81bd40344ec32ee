#!/usr/bin/env bash
# Runs tests back to back while busy loops hold both cores, so that a test whose result depends on
# thread timing shows it here rather than once a month in CI. Builds nothing: pass a built folder.
#
#   tests/stress/repeat_under_load.sh BUILD_DIR [TEST...]
#
# TEST is a CTest name matched exactly (default: tst_telemetry_sender tst_engine_run tst_engine_serve
# tst_cluster_hosts). Each runs 20 times in a row; the first failure stops the script, and it says
# how many runs had passed.
set -euo pipefail

readonly runs=20

if [ $# -lt 1 ] || [ "$1" = -h ] || [ "$1" = --help ]; then
    echo "usage: $0 BUILD_DIR [TEST...]   (default tests: tst_telemetry_sender tst_engine_run tst_engine_serve tst_cluster_hosts)" >&2
    exit 2
fi
build=$1
shift
tests=("$@")
[ ${#tests[@]} -gt 0 ] || tests=(tst_telemetry_sender tst_engine_run tst_engine_serve tst_cluster_hosts)
if [ ! -f "$build/CTestTestfile.cmake" ]; then
    echo "error: '$build' is not a CMake build folder (no CTestTestfile.cmake); configure and build it first" >&2
    exit 2
fi

# The agents run under mpirun, which refuses root unless told twice.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

load_pids=()
stop_load() {
    for pid in "${load_pids[@]}"; do
        kill "$pid" 2>/dev/null || true
    done
}
trap stop_load EXIT
# Exit through the EXIT trap on Ctrl-C or kill too, so no busy loop outlives the script.
trap 'exit 130' INT
trap 'exit 143' TERM
for _ in 1 2; do
    sh -c 'while :; do :; done' &
    load_pids+=($!)
done

for name in "${tests[@]}"; do
    for ((run = 1; run <= runs; ++run)); do
        # --no-tests=error: a misspelt or unbuilt test must not count as a pass.
        if ! ctest --test-dir "$build" -R "^${name}\$" --no-tests=error --output-on-failure; then
            echo "FAIL: $name failed on run $run; $((run - 1)) of $runs runs passed" >&2
            exit 1
        fi
    done
    echo "PASS: $name passed $runs of $runs runs under load"
done
