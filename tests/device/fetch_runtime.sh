#!/usr/bin/env bash
# Run here, before a device check: copies the check's binaries without their debug information into
# .device-bin/ (so that they fit the GPU machine's carry limit), and downloads (never installs) the Debian
# packages that provide every shared library they and Open MPI need into .device-runtime/ (both git-ignored),
# so that check.sh can unpack them on the GPU machine, which has CUDA 13 and no package registry. CUDA's own
# libraries are left out: the GPU machine's are used.
#
# "Every shared library" is a closure, not the binaries' ldd: Open MPI loads its MCA components
# (openmpi/lib/openmpi3/mca_*.so) with dlopen, and they need libraries the binaries never name
# (mca_pmix_ext3x.so needs libpmix.so.2; the UCX and libfabric components need libucx0, libfabric1 and
# their providers). So ldd runs over every ELF file of every package carried, and the packages of what they
# need join the set until nothing new appears. A library that nothing installed here provides fails the
# fetch, naming it.
#
# The result must fit the device machine's 64 MiB (the working tree that travels, plus .device-bin/ and
# .device-runtime/); a larger one fails here, with the sizes, rather than there.
#
# usage: tests/device/fetch_runtime.sh [BUILD_DIR [DEST_DIR]]
#        (default build and the repository root; DEST_DIR gets .device-bin/ and .device-runtime/)
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
dest=${2:-.}
fail() { echo "fetch_runtime: $*" >&2; exit 1; }

binaries=("$build/bin/tst_cuda_kernels" "$build/bin/meshbench-agent" "$build/bin/bench_gpu")
for b in "${binaries[@]}"; do
  [[ -x $b ]] || fail "$b is not built; build it first (cmake --build $build --target $(basename "$b"));" \
    "bench_gpu and the CUDA kernels need a CUDA 13 toolkit at /usr/local/cuda"
done
for tool in orterun orted; do
  command -v "$tool" > /dev/null || fail "$tool is not installed here; install openmpi-bin (packaging/install_deps.sh)"
done
mkdir -p "$dest"
rm -rf "$dest/.device-bin" && mkdir -p "$dest/.device-bin"
for b in "${binaries[@]}"; do strip --strip-debug -o "$dest/.device-bin/$(basename "$b")" "$b"; done

# glibc and the compiler runtime are on every machine (the GPU machine's are as new or newer); everything
# else travels.
base='libc6|libgcc-s1|libstdc\+\+6|zlib1g'
# Open MPI itself: orterun (mpirun), orted, the libraries, the MCA components and the help files.
openmpi=(openmpi-bin openmpi-common libopenmpi3)

is_elf() { [[ -f $1 && ! -L $1 && $(od -An -tx1 -N4 "$1" 2> /dev/null | tr -d ' ') == 7f454c46 ]]; }

# What the check needs besides the packages, for every library a carried file loads: the folder it was found
# in (RUNPATHs such as UCX's /usr/lib/x86_64-linux-gnu/ucx, and Open MPI's and OpenBLAS's own folders), and
# the links that no package installs (Debian's alternatives, as libblas.so.3 and libpsm_infinipath.so.1),
# which check.sh makes in its prefix.
declare -A owner=() libdir=() link=()
carried() { ! grep -q -x -E "$base" <<< "$1"; }   # carried PACKAGE: true unless every machine has it
pkg_of() { dpkg -S "$1" 2> /dev/null | grep -v '^diversion' | head -1 | cut -d: -f1 | cut -d, -f1 || true; }
variants() {   # variants PATH: PATH, and PATH across the /lib -> /usr/lib merge (dpkg knows one of them)
  echo "$1"
  case $1 in /usr/lib/* | /usr/lib64/*) echo "${1#/usr}" ;; /lib/* | /lib64/*) echo "/usr$1" ;; esac
}
owner_of() {   # owner_of LIB: sets owner[LIB] to the package that installed LIB, and libdir and link
  local lib=$1 path found
  [[ -n ${owner[$lib]:-} ]] && return
  for path in $(variants "$lib"); do
    found=$(pkg_of "$path")
    [[ -n $found ]] && { owner[$lib]=$found; ! carried "$found" || libdir[$(dirname "$path")]=1; return; }
  done
  for path in $(variants "$(readlink -f "$lib")"); do
    found=$(pkg_of "$path")
    [[ -n $found ]] || continue
    owner[$lib]=$found
    ! carried "$found" || { libdir[$(dirname "$lib")]=1; link[$lib]=$path; }
    return
  done
  return 1
}

# libraries FILE...: the libraries that the ELF files among FILEs load; "not found LIB FILE" for each unresolved
libraries() {
  local f
  for f in "$@"; do
    is_elf "$f" || continue
    ldd "$f" 2> /dev/null | awk -v file="$f" '$2 == "=>" && $3 == "not" {print "not found " $1 " " file; next}
                                             $2 == "=>" && $3 ~ /^\// {print $3}'
  done | sort -u
}

# needs FILE...: sets needed to the packages of what FILEs load (glibc's and the compiler's left out); fails on
# any library unresolved or from no package
needs() {
  local lib missing=0 found=()
  while read -r lib; do
    case $lib in
      "") ;;
      "not found "*) read -r _ _ name file <<< "$lib"
                     echo "fetch_runtime: $file needs $name, which is not installed here" >&2; missing=1 ;;
      /usr/local/cuda/*) ;;   # the GPU machine's CUDA is used
      *) if owner_of "$lib"; then found+=("${owner[$lib]}")
         else echo "fetch_runtime: $lib is from no Debian package; the check carries only packages" >&2
           missing=1
         fi ;;
    esac
  done < <(libraries "$@")
  ((missing == 0)) || fail "install what is missing (apt-get install, or packaging/install_deps.sh) and run this again"
  needed=$( ((${#found[@]})) && printf '%s\n' "${found[@]}" | grep -v -x -E "$base" | sort -u || true)
}

# The closure: the binaries' packages and Open MPI's, then every ELF file of each package carried, until no
# new package appears.
needs "${binaries[@]}" "$(readlink -f "$(command -v orterun)")" "$(readlink -f "$(command -v orted)")"
packages=$(printf '%s\n' "${openmpi[@]}" "$needed" | grep -v '^$' | sort -u)
scanned=""
while :; do
  fresh=$(comm -23 <(echo "$packages") <(echo "$scanned"))
  [[ -z $fresh ]] && break
  scanned=$packages
  # shellcheck disable=SC2086  # a package name a word
  mapfile -t files < <(dpkg -L $fresh | sort -u)
  needs "${files[@]}"
  packages=$(printf '%s\n' "$packages" "$needed" | grep -v '^$' | sort -u)
done

# The installed versions, so that what was scanned is what travels: a .deb from apt's cache when it is the
# one installed, else downloaded; the registry's version where it no longer has the installed one.
rm -rf "$dest/.device-runtime" && mkdir -p "$dest/.device-runtime"
wanted=()
while read -r p; do
  read -r version arch < <(dpkg-query -W -f='${Version} ${Architecture}\n' "$p" | head -1)
  deb="${p}_${version//:/%3a}_${arch}.deb"
  if [[ -f /var/cache/apt/archives/$deb ]]; then
    cp "/var/cache/apt/archives/$deb" "$dest/.device-runtime/"
  elif [[ $(apt-cache show "$p=$version" 2> /dev/null) == *$'\nFilename: '* ]]; then   # in a registry too
    wanted+=("$p=$version")
  else
    # Superseded in the registry (a security update not yet installed here): the registry's version travels,
    # and check.sh's ldd over the prefix shows whether it serves.
    echo "fetch_runtime: $p $version (installed) is no longer in the registry; carrying" \
      "$(apt-cache policy "$p" | awk '/Candidate:/ {print $2}') instead (apt-get upgrade $p to match)" >&2
    wanted+=("$p")
  fi
done <<< "$packages"
printf '%s\n' "${!libdir[@]}" | sort > "$dest/.device-runtime/libdirs.txt"
for l in "${!link[@]}"; do echo "$l ${link[$l]}"; done | sort > "$dest/.device-runtime/links.txt"
if ((${#wanted[@]})); then
  sandbox=()
  [[ $(id -u) != 0 ]] || sandbox=(-o APT::Sandbox::User=root)   # else apt warns that _apt cannot write here
  (cd "$dest/.device-runtime" && apt-get download -q=2 "${sandbox[@]}" "${wanted[@]}") ||
    fail "apt-get download ${wanted[*]} failed: is the package registry reachable, and apt's list current" \
      "(apt-get update)?"
fi

for deb in "$dest/.device-runtime"/*.deb; do dpkg-deb --show --showformat='${Package} ${Version}\n' "$deb"; done \
  > "$dest/.device-runtime/packages.txt"

# The device machine takes 64 MiB in all: the working tree that travels and the two carried folders
# (MESHBENCH_CARRY_LIMIT_MIB sets another limit, to try this).
limit_mib=${MESHBENCH_CARRY_LIMIT_MIB:-64}
mib() { echo $((($1 + 1048575) / 1048576)); }
bin_bytes=$(du -sb "$dest/.device-bin" | cut -f1)
deb_bytes=$(du -sb "$dest/.device-runtime" | cut -f1)
tree_bytes=$(git ls-files -z -c -o --exclude-standard | du -cb --files0-from=- 2> /dev/null | tail -1 | cut -f1)
total=$((bin_bytes + deb_bytes + tree_bytes))
summary="$(wc -l < "$dest/.device-runtime/packages.txt") packages $(mib "$deb_bytes") MiB,"
summary+=" binaries $(mib "$bin_bytes") MiB,"
summary+=" working tree $(mib "$tree_bytes") MiB: $(mib "$total") MiB of the device machine's $limit_mib"
((total <= limit_mib * 1048576)) ||
  fail "too large to carry: $summary. Make the binaries smaller (CUDA code for sm_90 only, strip --strip-unneeded)," \
    "or move large untracked files out of the working tree"
echo "fetch_runtime: $summary; in $dest/.device-bin/ and $dest/.device-runtime/"
