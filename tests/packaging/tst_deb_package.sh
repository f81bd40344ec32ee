#!/usr/bin/env bash
# tst_deb_package SOURCE_DIR BUILD_DIR: packs the binaries already in BUILD_DIR with
# packaging/build_deb.sh (which fails on lintian errors), installs the package with dpkg into a
# throwaway root (its own dpkg database: the real system is not touched), and runs the installed
# engine's plan of the installed demo job. Exit 77 (skipped) when not root.
set -euo pipefail
source_dir="$1"
build_dir="$2"

if [ "$(id -u)" -ne 0 ]; then
  echo "SKIP: dpkg installs as root only"
  exit 77
fi

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

log="$build_dir/tests/deb-package.log"
status=0
"$source_dir/packaging/build_deb.sh" --build-dir "$build_dir" --no-build > "$log" 2>&1 || status=$?
cat "$log"   # the package's path and lintian's report
[ "$status" -eq 0 ] || fail "packaging/build_deb.sh failed (status $status)"
deb="$(grep '\.deb$' "$log" | tail -n 1)"
version="$(grep -m1 '^project(meshbench VERSION' "$source_dir/CMakeLists.txt" | sed 's/.*VERSION \([0-9.]*\).*/\1/')"
[ "$(basename "$deb")" = "meshbench_${version}_amd64.deb" ] || fail "package named $(basename "$deb")"
echo "package $deb"
dpkg-deb --info "$deb"
depends="$(dpkg-deb --field "$deb" Depends)"
grep -q 'openmpi-bin' <<< "$depends" || fail "Depends lacks openmpi-bin"
grep -q 'python3' <<< "$depends" || fail "Depends lacks python3 (the Python client's package)"
grep -q 'libqt6widgets6' <<< "$depends" || fail "Depends lacks Qt (did dpkg-shlibdeps run?)"

root="$(mktemp -d "$build_dir/tests/deb-root.XXXXXX")"
trap 'rm -rf "$root" "$root.dpkg.log"' EXIT
# An empty dpkg database of the throwaway root.
mkdir -p "$root/var/lib/dpkg/info" "$root/var/lib/dpkg/updates" "$root/var/lib/dpkg/triggers"
touch "$root/var/lib/dpkg/status" "$root/var/lib/dpkg/available"
# Its dependencies are listed as missing there (they are the host's): --force-depends, output kept for a failure.
dpkg --root="$root" --force-depends --log=/dev/null -i "$deb" > "$root.dpkg.log" 2>&1 ||
  { cat "$root.dpkg.log"; fail "dpkg --root could not install the package"; }
dpkg --root="$root" -s meshbench | grep -q '^Status: install ok installed' || fail "dpkg does not list it as installed"

for f in usr/bin/meshbench usr/bin/meshbench-engine usr/bin/meshbench-agent \
         usr/share/applications/meshbench.desktop \
         usr/share/icons/hicolor/scalable/apps/meshbench.svg \
         usr/share/metainfo/io.github.meshbench.meshbench.metainfo.xml \
         usr/share/man/man1/meshbench.1.gz usr/share/man/man1/meshbench-engine.1.gz \
         usr/share/man/man1/meshbench-agent.1.gz \
         usr/share/doc/meshbench/copyright usr/share/doc/meshbench/changelog.gz \
         usr/share/meshbench/jobs/demo.json; do
  [ -s "$root/$f" ] || fail "the package does not install /$f"
done
# Each man page is the program's own: its title names it.
for program in meshbench meshbench-engine meshbench-agent; do
  page="$(zcat "$root/usr/share/man/man1/$program.1.gz")"
  grep -q "^\.TH \"\?${program^^}\"\? " <<< "$page" || fail "$program.1.gz is not $program's man page"
done
desktop-file-validate "$root/usr/share/applications/meshbench.desktop" || fail "the desktop entry is invalid"
appstreamcli validate --no-net "$root/usr/share/metainfo/io.github.meshbench.meshbench.metainfo.xml" ||
  fail "the AppStream metadata is invalid"
# Nothing the installed binaries need comes from the CUDA toolkit or the build folder.
for program in meshbench meshbench-engine meshbench-agent; do
  libraries="$(ldd "$root/usr/bin/$program")"
  ! grep -q 'not found' <<< "$libraries" || fail "$program: $(grep 'not found' <<< "$libraries")"
  ! grep -q '/usr/local/cuda' <<< "$libraries" || fail "$program links the CUDA toolkit: $libraries"
  ! readelf -d "$root/usr/bin/$program" | grep -q 'RUNPATH\|RPATH' || fail "$program keeps a run path"
done

plan="$("$root/usr/bin/meshbench-engine" plan "$root/usr/share/meshbench/jobs/demo.json")" ||
  fail "the installed meshbench-engine plan failed"
echo "$plan"
grep -q '1.44 M parameters' <<< "$plan" || fail "the plan does not count the demo's 1.44 M parameters"
grep -q 'dp 2 x pp 2 x tp 2 = 8 ranks, ep 2' <<< "$plan" || fail "the plan lacks the demo's layout"
grep -Eq '^Memory per GPU \(capacity 12\.64 GB\)' <<< "$plan" || fail "the plan lacks memory per GPU"
grep -Eq '^Step +[0-9.]+ ms: compute' <<< "$plan" || fail "the plan lacks the step time"
help="$("$root/usr/bin/meshbench-agent" --help)" || fail "the installed agent does not start"
grep -q -- '--job' <<< "$help" || fail "the installed agent's help lacks --job"
echo "PASS: installed $(basename "$deb") into $root and planned the demo from /usr/bin/meshbench-engine"
