#!/usr/bin/env bash
# Checks that every C++ and CUDA source of the tree is formatted as .clang-format says, with
# Debian 12's clang-format 14 (another version formats some constructs differently). Prints each
# file and line that differs and exits 1 if any does; fix them with
#   clang-format-14 -i FILE...
#
#   tests/format/check_format.sh SOURCE_ROOT
set -euo pipefail

root=${1:?usage: $0 SOURCE_ROOT}
cd "$root"
format=$(command -v clang-format-14 || true)
if [ -z "$format" ]; then
    echo "error: clang-format-14 is not installed; run packaging/install_deps.sh (Debian's clang-format)" >&2
    exit 2
fi
# The tracked sources in a clone; every source under the tree's folders otherwise (a tarball).
if git rev-parse --is-inside-work-tree > /dev/null 2>&1; then
    mapfile -t files < <(git ls-files -- '*.cpp' '*.h' '*.cu' '*.cuh')
else
    mapfile -t files < <(find agent app engine kernels tests -name '*.cpp' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh')
fi
if [ ${#files[@]} -eq 0 ]; then
    echo "error: no sources found under $root" >&2
    exit 2
fi
"$format" --dry-run --Werror "${files[@]}"
echo "${#files[@]} files formatted as .clang-format says"
