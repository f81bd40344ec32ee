#!/bin/bash
# clang-tidy with the tree's .clang-tidy over the given C++ sources (a header stands for the
# sources beside it that include it), or over every C++ source of the build when none are given.
# Reads the compile commands of the build (MESHBENCH_BUILD_DIR, default build/); prints each
# finding and exits 1 when there is one, 0 when the files are clean, 2 when it cannot run.
# CUDA sources are compiled by nvcc, whose commands clang-tidy cannot read: they are skipped.
#
#   packaging/lint.sh engine/service/job_runner.cpp app/monitor/run_state.h
#   packaging/lint.sh              # the whole tree (a while: tens of minutes on two cores)
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build=${MESHBENCH_BUILD_DIR:-$root/build}
database=$build/compile_commands.json
tidy=$(command -v clang-tidy-14 || command -v clang-tidy || true)
if [ -z "$tidy" ]; then
    echo "lint.sh: clang-tidy is not installed (packaging/install_deps.sh installs it)" >&2
    exit 2
fi
if [ ! -f "$database" ]; then
    echo "lint.sh: $database is missing: configure the build first (packaging/build.sh)" >&2
    exit 2
fi

# The sources the build compiles, relative to the tree.
mapfile -t known < <(python3 -c '
import json, os, sys
root, database, build = sys.argv[1], sys.argv[2], os.path.realpath(sys.argv[3])
for entry in json.load(open(database)):
    path = os.path.realpath(os.path.join(entry["directory"], entry["file"]))
    # Ours only: not what the build generates (moc), nor what lies outside the tree.
    if path.endswith(".cpp") and path.startswith(root + "/") and not path.startswith(build + "/"):
        print(os.path.relpath(path, root))
' "$root" "$database" "$build" | sort -u)

sources=()
if [ $# -eq 0 ]; then
    sources=("${known[@]}")
else
    for given in "$@"; do
        file=$(realpath --relative-to="$root" "$given" 2>/dev/null || echo "$given")
        case "$file" in
        *.cu | *.cuh) echo "lint.sh: $file is CUDA, compiled by nvcc: skipped" >&2 ;;
        *.cpp)
            if printf '%s\n' "${known[@]}" | grep -qx "$file"; then
                sources+=("$file")
            else
                echo "lint.sh: $file is not in the build's compile commands: reconfigure, or check the path" >&2
                exit 2
            fi
            ;;
        *.h)
            # The sources of its folder that include it by name; its own .cpp first.
            base=$(basename "$file")
            mapfile -t users < <(printf '%s\n' "${known[@]}" | grep "^$(dirname "$file")/" |
                while read -r source; do grep -l "[/\"]$base\"" "$root/$source" >/dev/null 2>&1 && echo "$source"; done)
            if [ ${#users[@]} -eq 0 ]; then
                echo "lint.sh: no source beside $file includes it: name a source that does" >&2
                exit 2
            fi
            sources+=("${users[@]}")
            ;;
        *) echo "lint.sh: $file is not a C++ source or header" >&2 && exit 2 ;;
        esac
    done
fi
[ ${#sources[@]} -eq 0 ] && exit 0
mapfile -t sources < <(printf '%s\n' "${sources[@]}" | sort -u)

# Findings only (clang-tidy also counts the warnings it suppressed in system headers), each once:
# a header's finding comes back with every source that includes it.
cd "$root" || exit 2
findings=$(printf '%s\n' "${sources[@]}" |
    xargs -P "$(nproc)" -n 4 "$tidy" -p "$build" --quiet 2>/dev/null |
    python3 -c '
import re, sys
lines, seen = sys.stdin.read().splitlines(), set()
for i, line in enumerate(lines):
    if re.search(r":\d+:\d+: (warning|error): ", line) and line not in seen:
        seen.add(line)
        print("\n".join(lines[i:i + 3]))
')
if [ -n "$findings" ]; then
    echo "$findings"
    echo "lint.sh: $(echo "$findings" | grep -cE ': (warning|error): ') findings in ${#sources[@]} sources" >&2
    exit 1
fi
echo "lint.sh: ${#sources[@]} sources clean" >&2
