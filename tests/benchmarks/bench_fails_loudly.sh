#!/usr/bin/env bash
# Issue 27, finding 19: a benchmark whose runs fail prints no figures and exits non-zero. Runs
# bench_overlap where its runs cannot succeed: as root without Open MPI's leave to run as root
# (refused before any run), and with an mpirun that cannot launch anything (a launcher component
# that does not exist), so that every run fails.
#
#   tests/benchmarks/bench_fails_loudly.sh BENCH_OVERLAP
set -euo pipefail

bench=${1:?usage: $0 BENCH_OVERLAP}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# expect_failure NAME TEXT_ON_STDERR COMMAND...
expect_failure() {
    local name=$1 text=$2
    shift 2
    local status=0
    "$@" > "$out/$name.out" 2> "$out/$name.err" || status=$?
    if [ "$status" -eq 0 ]; then
        echo "FAIL: $name: exit status 0" >&2
        cat "$out/$name.out" "$out/$name.err" >&2
        exit 1
    fi
    if [ -s "$out/$name.out" ]; then
        echo "FAIL: $name: figures on stdout after failed runs:" >&2
        cat "$out/$name.out" >&2
        exit 1
    fi
    if ! grep -qF -- "$text" "$out/$name.err"; then
        echo "FAIL: $name: stderr does not say '$text':" >&2
        cat "$out/$name.err" >&2
        exit 1
    fi
    echo "ok: $name: exit status $status, no figures, and stderr says '$text'"
}

if [ "$(id -u)" -eq 0 ]; then
    expect_failure as-root "OMPI_ALLOW_RUN_AS_ROOT=1" \
        env -u OMPI_ALLOW_RUN_AS_ROOT -u OMPI_ALLOW_RUN_AS_ROOT_CONFIRM "$bench" 2
fi
expect_failure no-launcher "runs failed; no figures" \
    env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_plm=no_such_launcher "$bench" 2
