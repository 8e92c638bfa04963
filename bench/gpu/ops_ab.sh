#!/usr/bin/env bash
# An A/B of kernels without a switch (a change to a kernel's code, not a new form): the op
# benchmark of an older tree (bench/gpu/ib_ops_bench.base in the prebuilt bundle, packed by
# prebuilt.sh with IB_BASE_OPS_BENCH) against this tree's, interleaved IB_PASSES times (2) on the
# sections in IB_OPS_SECTIONS (attention: split-KV decode at 1-1,024 sequences, the tensor-core
# decode kernel, flash prefill at 8 x 512, 1 x 2,048 and 1 x 8,192 tokens); then a summary of each
# row's time, base against new (ops_ab_summary.py). First, unless IB_SKIP_TESTS=1, the gpu tests
# in IB_BACKEND_TESTS and IB_ENGINE_TESTS (the kernels' differential tests against the CPU).
# Usage (carry .deps/icu.tar.xz and .deps/prebuilt.tar.xz; ~4 minutes): IB_PREBUILT=1 OUT=dir
# IB_OPS_SECTIONS=attention bash bench/gpu/ops_ab.sh. Writes tests.log, backend_cuda_test.json,
# engine_cuda_test.json, env.txt, ab.txt and ops.tgz (ops/{base,new}_N.{json,log}).
set -u; T0=$(date +%s)
cd "$(dirname "$0")/../.."; O=${OUT:-$PWD/gpu-out}; mkdir -p "$O/ops"
source bench/gpu/build_inferbench.sh && head_setup
[ -x "$B/bench/gpu/ib_ops_bench.base" ] ||
  { echo "no bench/gpu/ib_ops_bench.base in the bundle: pack it with IB_BASE_OPS_BENCH"; exit 2; }
echo "base $(cat "$B/bench/gpu/ib_ops_bench.base.COMMIT" 2>/dev/null)," \
  "new $(cat "$B/prebuilt/COMMIT")"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$O/env.txt" 2>&1
if [ "${IB_SKIP_TESTS:-0}" != 1 ]; then
  gpu_tests "${IB_BACKEND_TESTS:-*CudaAttention*:*CudaVision*}" "${IB_ENGINE_TESTS:-}"
fi
SECTIONS=${IB_OPS_SECTIONS:-attention}
for i in $(seq 1 "${IB_PASSES:-2}"); do
  for v in base new; do
    bin=$B/bench/gpu/ib_ops_bench; [ "$v" = base ] && bin=$bin.base
    IB_OPS_SECTIONS=$SECTIONS timeout 200 "$bin" "$O/ops/${v}_$i.json" > "$O/ops/${v}_$i.log" 2>&1
    echo "$v pass $i rc=$? +$(( $(date +%s) - T0 )) s"
  done
done
python3 bench/gpu/ops_ab_summary.py "$O/ops" | tee "$O/ab.txt"
tar czf "$O/ops.tgz" -C "$O" ops && rm -rf "$O/ops"  # at most 8 files come back from a call
echo "done +$(( $(date +%s) - T0 )) s"
