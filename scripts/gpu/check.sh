#!/usr/bin/env bash
# On a GPU host: unpack the bundle made by bundle.sh beside this file and run sluice's GPU checks,
# most valuable first, each under its own time limit; logs go to $OUT (or ./logs beside this file).
# Prints a summary table at the end: check, exit status, seconds. With $OUT set, the logs
# come back as two files: $OUT/all.log and $OUT/logs.tar.gz (every check's whole log), as a
# machine that returns only a few files needs.
#   SLUICE_GPU_QUICK=1   skip compute-sanitizer and the longer benchmarks
#   SLUICE_GPU_BUDGET=S  seconds for all checks together (default 540)
#   SLUICE_GPU_ONLY=RE   run only the checks whose names match the extended regex RE (a rerun)
set -u
here=$(cd "$(dirname "$0")" && pwd)
logs=$here/logs; rm -rf "$logs"; mkdir -p "$logs"
root=/tmp/sluice-gpu; rm -rf "$root"; mkdir -p "$root"
tar -C "$root" -xJf "$here/sluice-gpu.tar.xz" || { echo "cannot unpack $here/sluice-gpu.tar.xz"; exit 1; }
# The binaries name bench/peers/*.py under the source dir they were built from.
srcdir=$(cat "$root/SOURCE_DIR")
if [ ! -f "$srcdir/bench/peers/kernels_torch.py" ]; then
  mkdir -p "$srcdir/bench/peers" && cp "$root"/peers/*.py "$srcdir/bench/peers/"
fi
# CUDA runtime, cuBLAS and NCCL: the host's own (toolkit or the Python wheels').
cudadirs=$(for n in libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libnccl.so.2; do
  find /usr/local /usr/lib /opt -name "$n" 2>/dev/null | head -n 1 | xargs -r dirname; done | sort -u | paste -sd:)
export LD_LIBRARY_PATH="$root/lib:$cudadirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
for d in /usr/local/cuda/bin /usr/local/cuda-*/bin /opt/nvidia/*/bin; do [ -d "$d" ] && PATH=$PATH:$d; done
export PATH
py=$(command -v python3)
bin=$root/bin
summary=()
budget=${SLUICE_GPU_BUDGET:-540}   # seconds for all checks; each is cut to what is left
run() { # run NAME SECONDS CMD...  (output to $logs/NAME.log)
  local name=$1 secs=$2; shift 2
  if [ -n "${SLUICE_GPU_ONLY:-}" ] && ! [[ $name =~ $SLUICE_GPU_ONLY ]]; then return; fi
  local t0=$SECONDS left=$((budget - SECONDS))
  if [ "$left" -lt 10 ]; then summary+=("$(printf '%-28s not run: budget spent' "$name")"); return; fi
  [ "$secs" -gt "$left" ] && secs=$left
  echo "== $name: $*" | tee -a "$logs/all.log"
  timeout "$secs" "$@" >"$logs/$name.log" 2>&1; local rc=$?
  tail -n 25 "$logs/$name.log" | tee -a "$logs/all.log"
  local skipped; skipped=$(grep -c -i 'skipped' "$logs/$name.log")
  summary+=("$(printf '%-28s rc=%-4s %4ss  skipped-lines=%s' "$name" "$rc" $((SECONDS - t0)) "$skipped")")
}
{ echo "commit $(cat "$root/COMMIT")"; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; \
  echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"; } 2>&1 | tee "$logs/all.log"
run info               30  "$bin/sluice" info
run device_cuda        120 "$bin/test_tensor_device_cuda"
run cuda_kernels       120 "$bin/test_tensor_cuda_kernels"
run device_notify      120 "$bin/test_tensor_device_notify"
run conformance        300 "$bin/test_kernels_cuda_conformance"
run cuda_box           120 "$bin/test_kernels_cuda_box"
run nccl               120 "$bin/test_comm_dev_coll"   # test_nccl_gpu: NCCL on every GPU present
run session_cuda       180 "$bin/test_session_cuda"
run examples_mlp       180 "$bin/test_examples_mlp"    # every layout on the GPUs against the CPU's losses
run examples_gpt       180 "$bin/test_examples_gpt"
run mlp_cpu            60  "$bin/mlp" --devices cpu:1 --layout single --steps 10 --hidden 256 --in 256 --batch 64 --seed 7
run mlp_cuda           60  "$bin/mlp" --devices cuda:1 --layout single --steps 10 --hidden 256 --in 256 --batch 64 --seed 7
run gpt_cpu            120 "$bin/gpt" --devices cpu:1 --layout single --steps 10 --seed 7
run gpt_cuda           60  "$bin/gpt" --devices cuda:1 --layout single --steps 10 --seed 7
run kernels_vs_torch   240 "$bin/bench_kernels_vs_torch" --python "$py"
run gpt_gpu_vs_torch   240 "$bin/bench_gpt_gpu_vs_torch" --python "$py"
# Batch 4: the most GPT-2 small sequences whose registers fit 80 GB while every register
# lives for the whole job (batch 8 needs 113.8 GiB of them: `sluice plan`).
run gpt_gpu_b4         240 "$bin/bench_gpt_gpu_vs_torch" --python "$py" --batch 4
if [ "${SLUICE_GPU_QUICK:-0}" != 1 ]; then
  run notify_bench     120 "$bin/bench_cuda_notify" --iters 2000
  SLUICE_CONFORMANCE_TRIALS=1 run memcheck 300 compute-sanitizer --tool memcheck --error-exitcode 1 "$bin/test_kernels_cuda_conformance"
  run box_memcheck     120 compute-sanitizer --tool memcheck --error-exitcode 1 "$bin/test_kernels_cuda_box"
fi
for m in mlp gpt; do
  [ -f "$logs/${m}_cpu.log" ] && [ -f "$logs/${m}_cuda.log" ] || continue
  echo "== $m losses, cpu vs cuda" | tee -a "$logs/all.log"
  paste <(grep -E '^step' "$logs/${m}_cpu.log") <(grep -E '^step' "$logs/${m}_cuda.log") | tee -a "$logs/all.log"
done
echo "== summary" | tee -a "$logs/all.log"
printf '%s\n' "${summary[@]}" | tee -a "$logs/all.log"
if [ -n "${OUT:-}" ]; then
  cp "$logs/all.log" "$OUT/all.log" && tar -C "$logs" -czf "$OUT/logs.tar.gz" .
fi
