#!/usr/bin/env bash
# The device check's rehearsal, for CI: fetch_runtime.sh carries the runtime into the build folder, then
# check.sh runs on the CPU (MESHBENCH_CHECK_BACKEND=cpu, a small subset) in a private mount namespace where
# this machine's own copies of what is carried are hidden: Open MPI (mpirun, orterun, its libraries, MCA
# components, help files and /etc/openmpi) and every other file of the carried packages, each covered by an
# overlay whiteout. So the check can use only the carried copies, as on the bare GPU machine, and what they
# lack fails here. The libraries this script's own tools need (bash, python3, dpkg-deb, tar ...) stay
# visible: any machine that runs the check has them.
#
# A second, shorter run then drops one package the check needs (libpmix2, which Open MPI's PMIx component
# loads) and must fail: that shows the hiding works, so a pass means something.
#
# usage: tests/device/rehearse.sh SOURCE_DIR BUILD_DIR
# Exits 77 (CTest's skip) where it cannot rehearse: not root, no mount namespace, no overlayfs, or a build
# without the CUDA backend (bench_gpu, which the check carries, is not built then).
# MESHBENCH_REHEARSE_DROP=PACKAGE... leaves those packages out of the main run as well (to see it fail).
set -euo pipefail
if [[ ${1:-} == --inside ]]; then inside=1; shift; else inside=0; fi
src=$(cd "${1:?usage: rehearse.sh SOURCE_DIR BUILD_DIR}" && pwd)
build=$(cd "${2:?usage: rehearse.sh SOURCE_DIR BUILD_DIR}" && pwd)
work=$build/device-rehearsal
fail() { echo "rehearse: FAIL: $*" >&2; exit 1; }
skip() { echo "rehearse: SKIP: $*"; exit 77; }

# Inside the namespace: cover each hidden file with a whiteout and each hidden folder with an empty tmpfs,
# check that Open MPI is gone, run check.sh.
hide_and_check() {   # hide_and_check OUT CARRY STEPS LAYOUTS
  mount -t tmpfs -o size=64m rehearsal "$work/ns"
  local root rel n=0 name
  while read -r root; do
    local layer=$work/ns/$n
    mkdir -p "$layer/upper" "$layer/work"
    while read -r rel; do
      mkdir -p "$layer/upper/$(dirname "$rel")"
      mknod "$layer/upper/$rel" c 0 0
    done < <(awk -F'\t' -v root="$root" '$1 == root {print $2}' "$work/whiteouts.txt")
    # An overlay hides what is mounted below its folder (a bind-mounted driver library, say): each such
    # mount is held aside and mounted again on top.
    local below=() m k=0
    mapfile -t below < <(findmnt -rn -o TARGET | awk -v root="$root" 'index($0, root "/") == 1')
    for m in "${below[@]}"; do
      mkdir -p "$layer/held"
      if [[ -d $m ]]; then mkdir "$layer/held/$k"; else : > "$layer/held/$k"; fi
      mount --bind "$m" "$layer/held/$k"
      k=$((k + 1))
    done
    mount -t overlay overlay -o "lowerdir=$root,upperdir=$layer/upper,workdir=$layer/work" "$root"
    k=0
    for m in "${below[@]}"; do
      mount --bind "$layer/held/$k" "$m" || fail "could not mount $m again over the overlay on $root"
      k=$((k + 1))
    done
    n=$((n + 1))
  done < "$work/roots.txt"
  while read -r name; do mount -t tmpfs -o size=1m,mode=755 hidden "$name"; done < "$work/hidden_dirs.txt"
  # Hidden means hidden: nothing of the system's Open MPI may be left to find.
  for name in mpirun mpiexec orterun orted; do
    ! command -v "$name" > /dev/null || fail "$name is still visible at $(command -v "$name") in the namespace"
  done
  for name in /usr/lib/x86_64-linux-gnu/libmpi.so.40 /usr/lib/x86_64-linux-gnu/libpmix.so.2 \
    /usr/lib/x86_64-linux-gnu/openmpi/lib /etc/openmpi/openmpi-mca-params.conf; do
    [[ ! -e $name ]] || fail "$name is still visible in the namespace"
  done
  MESHBENCH_CHECK_BACKEND=cpu MESHBENCH_DEVICE_DIR=$2 MESHBENCH_CHECK_STEPS=$3 MESHBENCH_CHECK_LAYOUTS=$4 \
    MESHBENCH_CHECK_TRAIN_STEPS=3 "$src/tests/device/check.sh" "$1"
}
if ((inside)); then
  hide_and_check "$3" "$4" "$5" "$6"
  exit
fi

[[ $(id -u) == 0 ]] || skip "needs root, for a mount namespace in which to hide this machine's Open MPI"
command -v unshare > /dev/null || skip "unshare is not installed (util-linux)"
unshare --mount --propagation private true 2> /dev/null || skip "unshare --mount is not permitted here"
grep -qw overlay /proc/filesystems || skip "the kernel has no overlayfs"
[[ -x $build/bin/bench_gpu ]] ||
  skip "this build has no CUDA backend (bench_gpu is not built), so the device check has nothing to carry"
started=$SECONDS

rm -rf "$work" && mkdir -p "$work/ns" "$work/carry"
# A CI image may come without apt's lists (and so without any registry to download from).
if ! compgen -G '/var/lib/apt/lists/*_Packages*' > /dev/null; then
  echo "rehearse: apt has no package lists; apt-get update"
  apt-get update -qq || fail "apt-get update failed: fetch_runtime.sh needs the package registry"
fi
echo "rehearse: fetching the runtime into $work/carry"
"$src/tests/device/fetch_runtime.sh" "$build" "$work/carry"
runtime=$work/carry/.device-runtime
packages=$(cut -d' ' -f1 "$runtime/packages.txt")
for p in ${MESHBENCH_REHEARSE_DROP:-}; do
  compgen -G "$runtime/${p}_*.deb" > /dev/null || fail "MESHBENCH_REHEARSE_DROP names $p, which is not carried"
  rm "$runtime/${p}"_*.deb
  echo "rehearse: left $p out of the carried packages, as asked"
done

# What to hide: Open MPI's folders whole; every file (not folder) of the carried packages and Debian's
# alternatives links to Open MPI, less what this script and check.sh run on. Paths are canonical in their
# folders (/lib is /usr/lib here), the file itself left unresolved.
export LC_ALL=C
canonical() {   # each absolute path read, its folder resolved (dpkg -L also prints lines that are no paths)
  while read -r p; do
    if [[ $p == /* ]]; then echo "$(realpath -m "$(dirname "$p")")/$(basename "$p")"; fi
  done
}
tools=(bash sh env python3 dpkg-deb tar gzip timeout find xargs sed awk grep sort cut paste tr od du mktemp realpath
  readlink dirname basename ln rm mkdir cat tee wc head comm id ls mount mknod unshare nvidia-smi)
keep=$(for t in "${tools[@]}"; do
  p=$(command -v "$t") || continue
  readlink -f "$p"
  ldd "$p" 2> /dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}'
done | while read -r l; do echo "$l"; readlink -f "$l"; done | canonical | sort -u)
for d in /usr/lib/x86_64-linux-gnu/openmpi /usr/lib/x86_64-linux-gnu/pmix2 /usr/share/openmpi /etc/openmpi; do
  [[ -d $d ]] && realpath "$d"
done > "$work/hidden_dirs.txt"
# shellcheck disable=SC2086  # a package name a word
{
  dpkg -L $packages | while read -r f; do [[ -d $f ]] || echo "$f"; done
  for name in mpirun mpiexec orterun oshrun shmemrun; do
    p=$(command -v "$name") && echo "$p"
  done
  ls -d /etc/alternatives/mpi* /etc/alternatives/libmpi* 2> /dev/null || true
} | canonical | grep -v -E '^/usr/share/(doc|man|lintian|bug)/|^/etc/[^/]+$' | sort -u | comm -23 - <(echo "$keep") |
  awk 'NR == FNR {dir[$0]; next} {for (d in dir) if (index($0, d "/") == 1) next; print}' \
    "$work/hidden_dirs.txt" - > "$work/hidden_files.txt"
# Each whiteout goes into an overlay on its folder: /usr/X/Y for files deeper in /usr, /usr/X for files
# directly in it (/usr/bin), /etc/X for /etc; whiteouts.txt has a line "FOLDER<tab>PATH IN IT" per file.
awk -F/ -v OFS='\t' '{ r = ($2 == "usr") ? ((NF > 4) ? "/usr/" $3 "/" $4 : "/usr/" $3) : "/" $2 "/" $3
                       print r, substr($0, length(r) + 2) }' "$work/hidden_files.txt" > "$work/whiteouts.txt"
cut -f1 "$work/whiteouts.txt" | sort -u > "$work/roots.txt"
while read -r root; do
  [[ -d $root && ! -L $root ]] || fail "cannot hide what is in $root: it is not a folder"
done < "$work/roots.txt"
echo "rehearse: hiding $(wc -l < "$work/hidden_dirs.txt") folders and $(wc -l < "$work/hidden_files.txt") files" \
  "of this machine's ($(wc -l < "$work/roots.txt") overlays); keeping the $(echo "$keep" | wc -l) files" \
  "the tools themselves run on"

# The run: (a), (d) and (e) only load their binaries on the CPU; (b) and one layout of (c) train 3 steps.
status=0
unshare --mount --propagation private "$0" --inside "$src" "$build" "$work/out" "$work/carry" "a b d e c" \
  "2 2 1 1 1" || status=$?
[[ -f $work/out/summary.txt ]] || fail "check.sh wrote no summary.txt"
[[ -f $work/out/results.tar.gz ]] || fail "check.sh wrote no results.tar.gz"
count=$(find "$work/out" -type f | wc -l)
((count <= 8)) || fail "check.sh left $count files in its OUT_DIR; the device machine returns 8 at most"
tar -tzf "$work/out/results.tar.gz" > "$work/results.txt"
grep -q 'shared-dp2pp1tp1ep1.log' "$work/results.txt" || fail "results.tar.gz lacks the runs' logs"
((status == 0)) || fail "check.sh failed with this machine's Open MPI hidden (status $status; summary above)"
for line in "libraries *pass" "b cpu fp32 = cpu *pass" "c 2 ranks, one device *pass"; do
  grep -q "^$line" "$work/out/summary.txt" || fail "summary.txt has no line '$line'"
done
[[ -z ${MESHBENCH_REHEARSE_DROP:-} ]] || fail "check.sh passed without ${MESHBENCH_REHEARSE_DROP}"

# The control: the same preflight without libpmix2 must fail, naming libpmix.so.2.
mkdir -p "$work/dropped"
cp -al "$work/carry/.device-bin" "$work/carry/.device-runtime" "$work/dropped/"
rm -f "$work/dropped/.device-runtime"/libpmix2_*.deb
echo "rehearse: the control, without libpmix2 (must fail):"
status=0
unshare --mount --propagation private "$0" --inside "$src" "$build" "$work/out-dropped" "$work/dropped" "" "" ||
  status=$?
((status != 0)) || fail "check.sh passed without libpmix2: the namespace does not hide this machine's PMIx"
grep -q '^libraries *FAIL.*libpmix.so.2' "$work/out-dropped/summary.txt" ||
  fail "without libpmix2, check.sh failed but not for libpmix.so.2 (see $work/out-dropped/summary.txt)"
echo "rehearse: PASS in $((SECONDS - started)) s: the check passes on the carried runtime alone, and fails" \
  "without libpmix2"
