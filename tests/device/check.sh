#!/usr/bin/env bash
# The device check, run on the GPU machine (see the README's "On GPUs"). Needs .device-bin/ and
# .device-runtime/ carried (both from fetch_runtime.sh, run here first); unpacks the packages into a
# private prefix, never into /, and uses the machine's own CUDA 13 libraries (and the NCCL of its
# Python environment, if any). Writes every result to OUT_DIR and a summary to OUT_DIR/summary.txt:
#   (a) tst_cuda_kernels: every CUDA kernel against the CPU's, fp32 and bf16;
#   (b) the demo model on backend cuda against backend cpu, 20 steps, losses to 1e-4 relative;
#   (c) 2 and 4 ranks sharing the GPU (MPI with host staging) against one device, 20 steps;
#   (d) bench_gpu: the layer stack's TFLOP/s and MFU, each GEMM beside plain cuBLASLt, attention;
#   (e) bench_gpu --megatron-shapes: Megatron-LM's weak-scaling GEMMs through cuBLASLt beside the
#       planner's price for each (the device data bench_megatron_mfu's residuals need).
# The bf16-against-fp32 model run is not here: the model's bf16 path is not written yet.
#
# usage: tests/device/check.sh OUT_DIR
# MESHBENCH_CHECK_BACKEND=cpu runs (b)-(c) with the CPU in the GPU's place, to try the script's
# mechanics (the private prefix, mpirun from it) on a machine without a GPU.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${1:?usage: check.sh OUT_DIR}
gpu=${MESHBENCH_CHECK_BACKEND:-cuda}
mkdir -p "$out"
bin=.device-bin
[[ -x $bin/meshbench-agent ]] || { echo "check: $bin/ is missing; run tests/device/fetch_runtime.sh here first" >&2; exit 1; }
prefix=$(mktemp -d /tmp/meshbench-runtime.XXXXXX)
for deb in .device-runtime/*.deb; do dpkg -x "$deb" "$prefix"; done
nccl=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(nvidia.nccl.__path__[0], "lib"))' 2>/dev/null || true)
export LD_LIBRARY_PATH="$prefix/usr/lib/x86_64-linux-gnu:$prefix/usr/lib/x86_64-linux-gnu/openblas-pthread:/usr/local/cuda/lib64${nccl:+:$nccl}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# Open MPI from the private prefix: its tools, components and help files move with OPAL_PREFIX.
export OPAL_PREFIX="$prefix/usr" PATH="$prefix/usr/bin:$PATH"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1 QT_QPA_PLATFORM=offscreen
summary="$out/summary.txt"
: > "$summary"
failed=0
started=$SECONDS
record() {   # record NAME STATUS DETAIL: one line of the summary, with the seconds since the start
  printf '%-28s %s %4ds  %s\n' "$1" "$([[ $2 == 0 ]] && echo pass || echo FAIL)" $((SECONDS - started)) "$3" |
    tee -a "$summary"
  [[ $2 == 0 ]] || failed=1
}

{
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>&1 || echo "no nvidia-smi"
  echo "NCCL from: ${nccl:-none found}"
} > "$out/device.txt"
cat "$out/device.txt"

# (a)
timeout 90 "$bin/tst_cuda_kernels" -o "$out/cuda_kernels.txt,txt" > "$out/cuda_kernels.log" 2>&1; status=$?
totals=$(grep -E '^Totals' "$out/cuda_kernels.txt")
[[ $totals == *" 0 skipped"* ]] || status=1   # skipped kernels were not checked
record "a cuda kernels" $status "$totals"

# Jobs: the demo model with the layout and backend asked for, 20 steps.
job() {   # job NAME BACKEND DP PP TP EP
  python3 - "$@" <<'PY'
import json, sys
name, backend, dp, pp, tp, ep = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:])
spec = json.load(open("resources/jobs/demo.json"))
spec["backend"] = backend
spec["parallel"].update({"dp": dp, "pp": pp, "tp": tp, "ep": ep})
spec["cluster"]["devices_per_node"] = dp * pp * tp
spec["train"]["steps"] = 20
json.dump(spec, open(name, "w"))
PY
}
losses() { python3 -c 'import json,sys; print(" ".join(str(json.loads(l)["loss"]) for l in open(sys.argv[1])))' "$1"; }
agree() {   # agree METRICS_A METRICS_B: every step's loss to 1e-4 relative
  python3 - "$1" "$2" <<'PY'
import json, sys
a, b = ([json.loads(l)["loss"] for l in open(p)] for p in sys.argv[1:3])
worst = max(abs(x - y) / abs(y) for x, y in zip(a, b)) if len(a) == len(b) == 20 else float("inf")
print(f"worst relative difference {worst:.2e} over {len(a)} and {len(b)} steps")
sys.exit(0 if worst <= 1e-4 else 1)
PY
}
run() {   # run NAME RANKS BACKEND DP PP TP EP
  local name=$1 ranks=$2
  job "$out/$name.json" "$3" "$4" "$5" "$6" "$7"
  rm -f "$out/$name.metrics"
  # Bounded, so that a hang costs a minute of the GPU's time, not the check.
  if [[ $ranks == 1 ]]; then
    timeout 60 "$bin/meshbench-agent" --job "$out/$name.json" --metrics "$out/$name.metrics" > "$out/$name.log" 2>&1
  else
    timeout 90 mpirun -np "$ranks" --oversubscribe "$bin/meshbench-agent" --job "$out/$name.json" \
      --metrics "$out/$name.metrics" > "$out/$name.log" 2>&1
  fi
}

# (b)
run cpu 1 cpu 1 1 1 1; cpu=$?
run cuda 1 "$gpu" 1 1 1 1; cuda=$?
grep -E '^(model|communicator)' "$out/cuda.log" | head -2
if [[ $cpu == 0 && $cuda == 0 ]]; then
  detail=$(agree "$out/cuda.metrics" "$out/cpu.metrics"); status=$?
else
  detail="agent exited cpu $cpu, cuda $cuda (see cpu.log, cuda.log)"; status=1
fi
record "b cuda fp32 = cpu" $status "$detail"

# (c) Each layout against the same job on one device (the same global batch, computed by one rank).
for layout in "2 2 1 1 1" "4 2 1 2 1" "4 2 2 1 2"; do
  read -r ranks dp pp tp ep <<< "$layout"
  name="shared-dp${dp}pp${pp}tp${tp}ep${ep}"
  run "$name-one-device" 1 "$gpu" "$dp" "$pp" "$tp" "$ep"; reference=$?
  run "$name" "$ranks" "$gpu" "$dp" "$pp" "$tp" "$ep"; status=$?
  if [[ $status == 0 && $reference == 0 ]]; then
    detail="$(grep -m1 '^communicator' "$out/$name.log"); $(agree "$out/$name.metrics" "$out/$name-one-device.metrics")"
    status=$?
  else
    detail="exited $status, one device $reference (see $name.log)"; status=1
  fi
  record "c $ranks ranks, one GPU" $status "$detail"
done

# (d)
# Two layers and three repetitions: the figures are per layer, and the check's time is bounded.
timeout 150 "$bin/bench_gpu" --layers 2 --reps 3 > "$out/bench_gpu.txt" 2>&1
record "d bench_gpu" $? "$(grep -E '^layer stack' "$out/bench_gpu.txt")"
cat "$out/bench_gpu.txt"

# (e)
timeout 120 "$bin/bench_gpu" --megatron-shapes --reps 5 > "$out/megatron_shapes.txt" 2>&1
record "e megatron GEMM shapes" $? "$(grep -c 'one layer' "$out/megatron_shapes.txt") runs timed"
grep 'one layer' "$out/megatron_shapes.txt"

echo "check: results in $out"
exit "$failed"
