#!/usr/bin/env bash
# Visits to the GPU machine for the 4-bit formats (issue 14). Part a (~6 minutes): build, the gpu
# tests of the 4-bit ops against their definition (CudaQuant4*) and of the 8-bit ones (CudaQuant,
# the static-input-scale checkpoints' kernels among them), the engine's quantized tests, the op
# benchmark's W4A16 section (Llama-3-8B shapes), and tools/quant_compare.py on the two static
# input-scale checkpoint formats (issue 13). Part b: Llama-3-8B dummy weights with
# --quantization awq / gptq / nf4 at batch 1 and on the seed protocol (through fp8.sh).
# Usage (from the repository root): OUT=dir IB_PART=a|b bash bench/gpu/int4.sh
# Environment: IB_TEST_FILTER, IB_SKIP_QC=1 (part a without quant_compare), IB_AB_SUB=1 (below), IB_QUANTS (part b, "awq gptq nf4"), IB_RUNS (part b, "b1 seed").
# Writes (a) build.log, tests.log, backend_cuda_test.json, engine_cuda_test.json, ops.log,
# ops.json, qc.log; (b) runs.log, runs.json, runs.tgz.
set -u; T0=$(date +%s); el() { echo "+$(( $(date +%s) - T0 )) s"; }
cd "$(dirname "$0")/../.."; O=${OUT:-$PWD/gpu-out}; mkdir -p "$O"
export IB_BUILD_DIR=${IB_BUILD_DIR:-/tmp/ib-int4}; B=$IB_BUILD_DIR
if [ "${IB_PART:-a}" = a ]; then
  OUT=$O IB_TARGETS="inferbench backend_cuda_test engine_cuda_test ib_ops_bench" IB_RUNS=none \
    IB_OPS_SECTIONS=gemm_int4 IB_DEADLINE_S=420 \
    IB_TEST_FILTER="${IB_TEST_FILTER:-*CudaQuant4*:*CudaQuant.*:*CudaEngineQuant*:*CudaEngineCalibration*}" \
    bash bench/gpu/fp8.sh > "$O/fp8.log" 2>&1
  echo "fp8.sh rc=$? $(el)"; grep -E "rc=|FAILED|PASSED|Failure|per layer|BUILD" "$O/fp8.log" | head -40
  # IB_AB_SUB=1: the op benchmark again with one 128-k sub-step per W4A16 warp step
  # (IB_GEMV_INT4_SUB=1) into ops_sub1.json, against the default's ops.json.
  if [ "${IB_AB_SUB:-0}" = 1 ]; then
    { cmake -S . -B "$B-sub1" -G Ninja -DCMAKE_BUILD_TYPE=Release -DINFERBENCH_CUDA=ON \
        -DCMAKE_CUDA_ARCHITECTURES=90a -DINFERBENCH_WERROR=OFF -DCMAKE_CUDA_FLAGS=-DIB_GEMV_INT4_SUB=1 &&
      cmake --build "$B-sub1" -j 16 --target ib_ops_bench; } > "$O/build_sub1.log" 2>&1 &&
      IB_OPS_SECTIONS=gemm_int4 "$B-sub1/bench/gpu/ib_ops_bench" "$O/ops_sub1.json" > "$O/ops_sub1.log" 2>&1
    echo "sub1 rc=$? $(el)"; grep -E "per layer|FAILED" "$O/ops_sub1.log" "$O/build_sub1.log" | head
  fi
  [ "${IB_SKIP_QC:-0}" = 1 ] || timeout 150 python3 tools/quant_compare.py --inferbench "$B/bin/inferbench" \
    --formats fp8-tensor-static,int8-w8a8-static > "$O/qc.log" 2>&1
  echo "quant_compare rc=$? $(el)"; tail -15 "$O/qc.log"
  rm -rf "$O/runs"
else
  OUT=$O IB_TARGETS="inferbench" IB_SKIP_TESTS=1 IB_SKIP_OPS=1 IB_SKIP_BF16=1 \
    IB_RUNS="${IB_RUNS:-b1 seed}" IB_QUANTS="${IB_QUANTS:-awq gptq nf4}" IB_DEADLINE_S=560 \
    bash bench/gpu/fp8.sh > "$O/fp8.log" 2>&1
  echo "fp8.sh rc=$? $(el)"; cat "$O/runs.log" 2>/dev/null
fi
# At most 8 files come back: the rest in extra.tgz.
( cd "$O" && ls | grep -vE '^(tests.log|backend_cuda_test.json|engine_cuda_test.json|ops.json|ops_sub1.json|qc.log|fp8.log|runs.json|runs.log)$'   | xargs -r tar czf extra.tgz --remove-files )
echo "done $(el)"
