#!/usr/bin/env bash
# The device check, run on the GPU machine (see docs/gpus.md, "The device check"). Needs .device-bin/ and
# .device-runtime/ carried (both from fetch_runtime.sh, run here first); unpacks the packages into a
# private prefix, never into /, and uses the machine's own CUDA 13 libraries (the toolkit's, else those of
# its Python environment's pip packages, NCCL among them). Nothing of the machine's own Open MPI is used, if
# it has one: mpirun is the carried orterun, by its full path, and the machine's OMPI_*, OPAL_*, PMIX_*
# settings are cleared; the carried libraries are on the path of the carried programs only.
#   (libraries) every carried binary and shared library (Open MPI's MCA components too) has each library
#       it needs, from the prefix or the machine; any "not found" fails the check, naming it;
#   (a) tst_cuda_kernels: every CUDA kernel against the CPU's, fp32 and bf16;
#   (b) the demo model on backend cuda against backend cpu, 20 steps, losses to 1e-4 relative;
#   (d) bench_gpu: the layer stack's TFLOP/s and MFU, each GEMM beside plain cuBLASLt, attention;
#   (e) bench_gpu --megatron-shapes: Megatron-LM's weak-scaling GEMMs through cuBLASLt beside the
#       planner's price for each (the device data bench_megatron_mfu's residuals need);
#   (c) 2 and 4 ranks sharing the GPU (MPI with host staging) against one device, 20 steps: last, so
#       that a hang there costs the benchmarks nothing.
# The bf16-against-fp32 model run is not here: the model's bf16 path is not written yet.
#
# Each step has its own time limit (the table `limit` below); their sum, with each one's grace for a
# process that ignores SIGTERM, is the worst case, which the script refuses to start above 540 s (the
# device machine runs a command for 600 s at most).
#
# Writes two files to OUT_DIR, since only a few come back from the device machine: summary.txt (the
# device and a line per step) and results.tar.gz (every log, job and metrics file).
#
# usage: tests/device/check.sh OUT_DIR
# Settings, for trying the mechanics here (tests/device/rehearse.sh does, with the machine's Open MPI
# hidden):
#   MESHBENCH_CHECK_BACKEND=cpu     (b) and (c) with the CPU in the GPU's place; (a), (d), (e) only check
#                                   that their binaries load
#   MESHBENCH_CHECK_STEPS="a b d e c"   the steps to run, in this order
#   MESHBENCH_CHECK_LAYOUTS="RANKS DP PP TP EP;..."   (c)'s layouts (default the three above)
#   MESHBENCH_CHECK_TRAIN_STEPS=20  optimizer steps of each model run
#   MESHBENCH_DEVICE_DIR=DIR        where .device-bin/ and .device-runtime/ are (default the repository)
set -euo pipefail
cd "$(dirname "$0")/../.."
die() { echo "check: $*" >&2; exit 2; }
out=${1:?usage: check.sh OUT_DIR}
gpu=${MESHBENCH_CHECK_BACKEND:-cuda}
[[ $gpu == cuda || $gpu == cpu ]] || die "MESHBENCH_CHECK_BACKEND is '$gpu'; use cuda (the default) or cpu"
steps=${MESHBENCH_CHECK_STEPS-a b d e c}
layouts=${MESHBENCH_CHECK_LAYOUTS:-2 2 1 1 1;4 2 1 2 1;4 2 2 1 2}
train_steps=${MESHBENCH_CHECK_TRAIN_STEPS:-20}
[[ $train_steps =~ ^[1-9][0-9]*$ ]] || die "MESHBENCH_CHECK_TRAIN_STEPS is '$train_steps'; give a positive count"
device_dir=$(cd "${MESHBENCH_DEVICE_DIR:-.}" && pwd) || die "MESHBENCH_DEVICE_DIR names no folder"
bin=$device_dir/.device-bin
runtime=$device_dir/.device-runtime
for b in tst_cuda_kernels meshbench-agent bench_gpu; do
  [[ -x $bin/$b ]] || die "$bin/$b is missing; run tests/device/fetch_runtime.sh here first and carry $bin"
done
compgen -G "$runtime/*.deb" > /dev/null && [[ -f $runtime/libdirs.txt && -f $runtime/links.txt ]] ||
  die "$runtime/ holds no packages, or not their library folders and links; run tests/device/fetch_runtime.sh" \
    "here first and carry $runtime"
command -v dpkg-deb > /dev/null || die "dpkg-deb is not on this machine; the carried packages cannot be unpacked"

# The time limits in seconds; `timeout` kills what outlives its limit by `grace` seconds.
declare -A limit=([unpack]=20 [libraries]=25 [device]=10 [a]=60 [b-cpu]=30 [b-gpu]=25 [d]=85 [e]=60
                  [c-one]=20 [c-ranks]=35 [tar]=10)
grace=3
IFS=';' read -r -a layout_list <<< "$layouts"
worst=0
add() { for s in "$@"; do worst=$((worst + limit[$s] + grace)); done; }
add unpack libraries device tar
for s in $steps; do
  case $s in
    a | d | e) add "$s" ;;
    b) add b-cpu b-gpu ;;
    c) for _ in "${layout_list[@]}"; do add c-one c-ranks; done ;;
    *) die "MESHBENCH_CHECK_STEPS names '$s'; the steps are a b c d e" ;;
  esac
done
((worst <= 540)) ||
  die "the steps asked for may take ${worst} s, over the 540 s the device machine allows; ask for fewer"
limited() { local l=${limit[$1]}; shift; timeout -k "$grace" "$l" "$@"; }   # limited STEP COMMAND...

mkdir -p "$out"
out=$(cd "$out" && pwd)
summary="$out/summary.txt"
: > "$summary"
work=$(mktemp -d /tmp/meshbench-check.XXXXXX)
prefix=$(mktemp -d /tmp/meshbench-runtime.XXXXXX)
finish() {
  limited tar tar -czf "$out/results.tar.gz" -C "$work" . ||
    echo "check: could not pack $work into $out/results.tar.gz" >&2
  rm -rf "$prefix" "$work"
}
trap finish EXIT
failed=0
started=$SECONDS
record() {   # record NAME pass|FAIL|skip DETAIL: one line of the summary, with the seconds since the start
  printf '%-28s %-4s %4ds  %s\n' "$1" "$2" $((SECONDS - started)) "$3" | tee -a "$summary"
  [[ $2 != FAIL ]] || failed=1
}
verdict() { [[ $1 == 0 ]] && echo pass || echo FAIL; }
echo "check: backend $gpu, steps $steps; worst case ${worst} s" | tee -a "$summary"

# The private prefix: every carried package unpacked, Open MPI relocated into it (its tools, components
# and help files move with OPAL_PREFIX; its configuration, which turns off the UCX, OFI and verbs
# transports, with OPAL_SYSCONFDIR; PMIx's folders below).
status=0
limited unpack bash -c 'for deb in "${@:2}"; do dpkg-deb -x "$deb" "$1" || exit; done' _ "$prefix" "$runtime"/*.deb \
  > "$work/unpack.log" 2>&1 || status=$?
mpirun=$prefix/usr/bin/orterun
if [[ $status != 0 || ! -x $mpirun ]]; then
  record "unpack" FAIL "the packages of $runtime did not unpack (status $status, see unpack.log); nothing can run"
  exit 1
fi
# Debian makes mpirun an alternatives link, which dpkg-deb -x never creates, and so are some libraries
# (libblas.so.3, libpsm_infinipath.so.1): fetch_runtime.sh listed them, and they are made here.
ln -sf orterun "$prefix/usr/bin/mpirun"
while read -r link target; do
  mkdir -p "$prefix$(dirname "$link")" && ln -sfn "$prefix$target" "$prefix$link"
done < "$runtime/links.txt"
record "unpack" pass "$(find "$runtime" -name '*.deb' | wc -l) packages into $prefix"

# The library path: every folder a carried library was found in where fetch_runtime.sh ran (/lib and
# /usr/lib apart, as the packages have them; RUNPATHs as UCX's), then CUDA 13's cuBLASLt and NCCL: the
# toolkit's, then those of python3's pip packages (nvidia-cublas, nvidia-nccl-cu13) where they are.
nvidia=$(python3 -c 'import nvidia; print(list(nvidia.__path__)[0])' 2> /dev/null || true)
pip_libs=$([[ -n $nvidia ]] && find "$nvidia" -maxdepth 4 \( -name libcublasLt.so.13 -o -name libnccl.so.2 \) \
  -printf '%h\n' 2> /dev/null | sort -u | paste -sd: || true)
nccl=$([[ -n $nvidia ]] && find "$nvidia" -maxdepth 4 -name libnccl.so.2 -printf '%h\n' 2> /dev/null | head -1 || true)
libpath=$(sed "s|^|$prefix|" "$runtime/libdirs.txt" | paste -sd:)
lib=$prefix/usr/lib/x86_64-linux-gnu
libpath+=":$lib:$prefix/lib/x86_64-linux-gnu:/usr/local/cuda/lib64${pip_libs:+:$pip_libs}"
# Only the carried programs get it ("${carried[@]}" COMMAND...): the machine's own tools (python3, tar) keep
# their libraries.
libpath+=${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
carried=(env "LD_LIBRARY_PATH=$libpath")
# An MPI of the machine's own (a CUDA image's HPC-X, say) may have left settings that would steer the carried
# one (OMPI_MCA_pml=ucx, OPAL_PREFIX): they go.
inherited=$(compgen -e | grep -E '^(OMPI|OPAL|ORTE|PMIX|PRTE)_' || true)
for v in $inherited; do unset "$v"; done
export PATH="$prefix/usr/bin:$PATH" OPAL_PREFIX="$prefix/usr" OPAL_SYSCONFDIR="$prefix/etc/openmpi"
# Debian's PMIx names its folders absolutely (not under its prefix) and its component path in its own
# pmix-mca-params.conf: each is set here, or it looks in /usr/lib/x86_64-linux-gnu/pmix2 and does without.
pmix=$lib/pmix2
export PMIX_PREFIX="$pmix" PMIX_LIBDIR="$pmix/lib" PMIX_DATADIR="$pmix/share" PMIX_SYSCONFDIR="$pmix/share" \
  PMIX_MCA_mca_base_component_path="$pmix/lib/pmix"
export OPENBLAS_NUM_THREADS=1 QT_QPA_PLATFORM=offscreen
# The device machine runs commands as root, which Open MPI refuses unless told.
if [[ $(id -u) == 0 ]]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi

# (libraries) What a bare machine lacks shows here, not as a component Open MPI quietly skips. ldd prints
# "FILE:" before each file's libraries when it is given two or more, hence /dev/null in every batch.
status=0
(
  cd "$prefix"
  find . \( -name '*.so' -o -name '*.so.*' -o -path './usr/bin/*' \) -type f -print0 | sed -z "s|^\.|$prefix|"
  find "$bin" -type f -print0
) | limited libraries "${carried[@]}" xargs -0 -r -n 64 ldd /dev/null > "$work/libraries.txt" 2>&1 || status=$?
# A library too old for a carried file (glibc, libstdc++) is as missing as an absent one.
missing=$(awk '/^[^\t ].*:$/ {file = substr($0, 1, length($0) - 1)} /=> not found/ {print file ": " $1}
               /version `.*. not found/ {sub(/^[^:]*: /, ""); print file ": " $0}' "$work/libraries.txt" | sort -u)
scanned=$(grep '^[^[:space:]].*:$' "$work/libraries.txt" | grep -c -v '^/dev/null:$' || true)
if [[ -n $missing ]]; then
  echo "check: these carried files need libraries that are neither carried nor on this machine:" >&2
  echo "$missing" | sed 's/^/  /' >&2
  record "libraries" FAIL "$(echo "$missing" | wc -l) missing ($(echo "$missing" | awk '{print $2}' | sort -u |
    tr '\n' ' ' | sed 's/ $//')): add their packages to tests/device/fetch_runtime.sh (see libraries.txt)"
elif [[ $status == 124 || $status == 137 ]]; then
  record "libraries" FAIL "ldd timed out after $scanned files (see libraries.txt)"
elif ((scanned == 0)); then
  record "libraries" FAIL "ldd read no file (see libraries.txt)"
else
  record "libraries" pass "$scanned files, every library they need found"
fi

{
  if command -v nvidia-smi > /dev/null; then
    limited device nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>&1 ||
      echo "nvidia-smi failed"
  else
    echo "no nvidia-smi"
  fi
  echo "NCCL from: ${nccl:-none found}"
  echo "mpirun: $mpirun ($("${carried[@]}" "$mpirun" --version 2>&1 | head -1))"
  echo "MPI settings of the machine's, cleared: ${inherited:-none}" | paste -sd' '
} > "$work/device.txt"
sed 's/^/  /' "$work/device.txt" | tee -a "$summary"

# Jobs: the demo model with the layout and backend asked for.
job() {   # job NAME BACKEND DP PP TP EP
  python3 - "$train_steps" "$@" << 'PY'
import json, sys
steps, name, backend, dp, pp, tp, ep = int(sys.argv[1]), sys.argv[2], sys.argv[3], *map(int, sys.argv[4:])
spec = json.load(open("resources/jobs/demo.json"))
spec["backend"] = backend
spec["parallel"].update({"dp": dp, "pp": pp, "tp": tp, "ep": ep})
spec["cluster"]["devices_per_node"] = dp * pp * tp
spec["train"]["steps"] = steps
json.dump(spec, open(name, "w"))
PY
}
agree() {   # agree METRICS_A METRICS_B: every step's loss to 1e-4 relative
  python3 - "$train_steps" "$1" "$2" << 'PY'
import json, sys
steps = int(sys.argv[1])
a, b = ([json.loads(l)["loss"] for l in open(p)] for p in sys.argv[2:4])
worst = max(abs(x - y) / abs(y) for x, y in zip(a, b)) if len(a) == len(b) == steps else float("inf")
print(f"worst relative difference {worst:.2e} over {len(a)} and {len(b)} steps")
sys.exit(0 if worst <= 1e-4 else 1)
PY
}
model() {   # model LIMIT NAME RANKS BACKEND DP PP TP EP: one job, bounded so that a hang costs its limit only
  local step=$1 name=$2 ranks=$3
  job "$work/$name.json" "$4" "$5" "$6" "$7" "$8"
  rm -f "$work/$name.metrics"
  if [[ $ranks == 1 ]]; then
    limited "$step" "${carried[@]}" "$bin/meshbench-agent" --job "$work/$name.json" --metrics "$work/$name.metrics" \
      > "$work/$name.log" 2>&1
  else
    limited "$step" "${carried[@]}" "$mpirun" -np "$ranks" --oversubscribe "$bin/meshbench-agent" \
      --job "$work/$name.json" --metrics "$work/$name.metrics" > "$work/$name.log" 2>&1
  fi
}
why() {   # why STATUS: a timeout or a failed start said as one
  case $1 in
    124 | 137) echo "timed out" ;;
    127) echo "did not start (127: a program or library missing)" ;;
    *) echo "exited $1" ;;
  esac
}

step_a() {
  local status=0 totals
  if [[ $gpu == cpu ]]; then
    limited a "${carried[@]}" "$bin/tst_cuda_kernels" -functions > "$work/cuda_kernels.log" 2>&1 || status=$?
    if [[ $status == 0 ]]; then record "a cuda kernels" skip "no GPU in cpu mode; the binary loads"
    else record "a cuda kernels" FAIL "the binary does not start: $(why "$status") (see cuda_kernels.log)"; fi
    return
  fi
  limited a "${carried[@]}" "$bin/tst_cuda_kernels" -o "$work/cuda_kernels.txt,txt" > "$work/cuda_kernels.log" 2>&1 ||
    status=$?
  totals=$(grep -E '^Totals' "$work/cuda_kernels.txt" 2> /dev/null || echo "no totals: $(why "$status")")
  [[ $totals == *" 0 skipped"* ]] || status=1   # skipped kernels were not checked
  record "a cuda kernels" "$(verdict "$status")" "$totals"
}

step_b() {
  local cpu=0 dev=0 detail status=0
  model b-cpu cpu 1 cpu 1 1 1 1 || cpu=$?
  model b-gpu cuda 1 "$gpu" 1 1 1 1 || dev=$?
  grep -E '^(model|communicator)' "$work/cuda.log" | head -2 || true
  if [[ $cpu == 0 && $dev == 0 ]]; then
    detail=$(agree "$work/cuda.metrics" "$work/cpu.metrics") || status=$?
  else
    detail="agent: cpu $(why "$cpu"), $gpu $(why "$dev") (see cpu.log, cuda.log)"; status=1
  fi
  record "b $gpu fp32 = cpu" "$(verdict "$status")" "$detail"
}

# Without a GPU, bench_gpu says "nothing measured" and exits 2: that it got so far shows it loads.
loads_only() {   # loads_only NAME LOG STATUS
  if [[ $3 == 2 ]] && grep -q 'nothing measured' "$2"; then record "$1" skip "no GPU in cpu mode; the binary loads"
  else record "$1" FAIL "the binary does not start: $(why "$3") (see $(basename "$2"))"; fi
}

step_d() {
  local status=0
  # Two layers and three repetitions: the figures are per layer, and the check's time is bounded.
  limited d "${carried[@]}" "$bin/bench_gpu" --layers 2 --reps 3 > "$work/bench_gpu.txt" 2>&1 || status=$?
  [[ $gpu == cpu ]] && { loads_only "d bench_gpu" "$work/bench_gpu.txt" "$status"; return; }
  record "d bench_gpu" "$(verdict "$status")" "$(grep -E '^layer stack' "$work/bench_gpu.txt" || why "$status")"
  cat "$work/bench_gpu.txt"
}

step_e() {
  local status=0
  limited e "${carried[@]}" "$bin/bench_gpu" --megatron-shapes --reps 5 > "$work/megatron_shapes.txt" 2>&1 || status=$?
  [[ $gpu == cpu ]] && { loads_only "e megatron GEMM shapes" "$work/megatron_shapes.txt" "$status"; return; }
  record "e megatron GEMM shapes" "$(verdict "$status")" \
    "$(grep -c 'one layer' "$work/megatron_shapes.txt" || true) runs timed, $(why "$status")"
  grep 'one layer' "$work/megatron_shapes.txt" || true
}

# A run can pass while Open MPI or PMIx looks for its files where the packages were built for, not in the
# prefix: a component it then does without, a help text it cannot print. Either is a fault of the check.
relocation_trouble() {   # relocation_trouble LOG: says what was looked for outside the prefix, if anything
  local line
  line=$(grep -m1 -E "couldn't open the help file|failed to add|unable to open|component_find: unable" "$1" -A1 |
    tr '\n' ' ' | tr -s ' ') || return 1
  echo "Open MPI or PMIx looked outside the prefix: $line"
}

# (c) Each layout against the same job on one device (the same global batch, computed by one rank).
step_c() {
  local layout ranks dp pp tp ep name reference status detail trouble
  for layout in "${layout_list[@]}"; do
    read -r ranks dp pp tp ep <<< "$layout"
    name="shared-dp${dp}pp${pp}tp${tp}ep${ep}"
    reference=0 status=0
    model c-one "$name-one-device" 1 "$gpu" "$dp" "$pp" "$tp" "$ep" || reference=$?
    model c-ranks "$name" "$ranks" "$gpu" "$dp" "$pp" "$tp" "$ep" || status=$?
    if [[ $status == 0 ]] && trouble=$(relocation_trouble "$work/$name.log"); then
      detail="$trouble (see $name.log)"; status=1
    elif [[ $status == 0 && $reference == 0 ]]; then
      detail="$(grep -m1 '^communicator' "$work/$name.log" || true); "
      detail+=$(agree "$work/$name.metrics" "$work/$name-one-device.metrics") || status=$?
    else
      detail="mpirun $(why "$status"), one device $(why "$reference") (see $name.log, $name-one-device.log)"; status=1
    fi
    record "c $ranks ranks, one device" "$(verdict "$status")" "$detail"
  done
}

for s in $steps; do "step_$s"; done

echo "-- summary.txt"
cat "$summary"   # again, last: a caller that keeps only the end of the output keeps this
echo "check: $( ((failed)) && echo FAILED || echo passed) in $((SECONDS - started)) s;" \
  "summary.txt and results.tar.gz in $out"
exit "$failed"
