#!/usr/bin/env bash
# Visits to the GPU machine for the 4-bit formats (issue 14). Part a (~6 minutes): build, the gpu
# tests of the 4-bit ops against their definition (CudaQuant4*) and of the 8-bit ones (CudaQuant,
# the static-input-scale checkpoints' kernels among them), the engine's quantized tests, the op
# benchmark's W4A16 section (Llama-3-8B shapes), and tools/quant_compare.py on the two static
# input-scale checkpoint formats (issue 13). Part b (~8 minutes): see below.
# Usage (from the repository root): OUT=dir IB_PART=a|b bash bench/gpu/int4.sh
# Environment: IB_TEST_FILTER, IB_SKIP_QC=1 (part a without quant_compare),
# IB_QUANTS (part b's batch-1 runs, "awq gptq nf4"), IB_SEED_QUANTS (its seed-protocol runs, "awq"),
# IB_SKIP_PACK=1, IB_SKIP_PROFILE=1 (part b without the packing check or the profile).
# Writes tests.log, backend_cuda_test.json, engine_cuda_test.json and (a) ops.json,
# qc.log, (b) pack_check.log, profile_awq_b1.txt, runs.log, runs.json; the rest in extra.tgz.
set -u; T0=$(date +%s); el() { echo "+$(( $(date +%s) - T0 )) s"; }
cd "$(dirname "$0")/../.."; O=${OUT:-$PWD/gpu-out}; mkdir -p "$O"
export IB_BUILD_DIR=${IB_BUILD_DIR:-/tmp/ib-int4}; B=$IB_BUILD_DIR
if [ "${IB_PART:-a}" = a ]; then
  OUT=$O IB_TARGETS="inferbench backend_cuda_test engine_cuda_test ib_ops_bench" IB_RUNS=none \
    IB_OPS_SECTIONS=gemm_int4 IB_DEADLINE_S=420 \
    IB_TEST_FILTER="${IB_TEST_FILTER:-*CudaQuant4*:*CudaQuant.*:*CudaEngineQuant*:*CudaEngineCalibration*}" \
    bash bench/gpu/fp8.sh > "$O/fp8.log" 2>&1
  echo "fp8.sh rc=$? $(el)"; grep -E "rc=|FAILED|PASSED|Failure|per layer|BUILD" "$O/fp8.log" | head -40
  [ "${IB_SKIP_QC:-0}" = 1 ] || timeout 150 python3 tools/quant_compare.py --inferbench "$B/bin/inferbench" \
    --formats fp8-tensor-static,int8-w8a8-static > "$O/qc.log" 2>&1
  echo "quant_compare rc=$? $(el)"; tail -15 "$O/qc.log"
  rm -rf "$O/runs"
else
  # Part b: build, the engine's quantized tests (CudaEngineQuant: awq, gptq and nf4 against the
  # CPU engine) and CudaQuant4 again, tools/int4_pack_check.py (torch packers of the published
  # layouts against inferbench's unpacking, on the CPU device), then Llama-3-8B dummy weights at
  # batch 1 and on the seed protocol, and a per-kernel profile of awq at batch 1.
  OUT=$O IB_TARGETS="inferbench backend_cuda_test engine_cuda_test ib_kernel_profile" IB_RUNS=none \
    IB_SKIP_OPS=1 IB_DEADLINE_S=300 \
    IB_TEST_FILTER="${IB_TEST_FILTER:-*CudaQuant4*:*CudaEngineQuant*}" bash bench/gpu/fp8.sh \
    > "$O/fp8.log" 2>&1
  echo "fp8.sh rc=$? $(el)"; grep -E "rc=|FAILED|PASSED|Failure|BUILD" "$O/fp8.log" | head -30
  [ "${IB_SKIP_PACK:-0}" = 1 ] || timeout 120 python3 tools/int4_pack_check.py --inferbench "$B/bin/inferbench" --out /tmp/pack \
    > "$O/pack_check.log" 2>&1
  echo "pack_check rc=$? $(el)"; tail -12 "$O/pack_check.log" 2>/dev/null
  R=$O/runs; mkdir -p "$R"
  run() { local name=$1 cap=$2; shift 2
    timeout -s INT "$cap" "$B/bin/inferbench" run --device cuda --dtype bf16 --load-format dummy \
      --disable-tqdm --model llama-3-8b --result-dir "$R/$name" --overwrite "$@" > "$R/$name.log" 2>&1
    echo "$name rc=$? $(el) $(grep -E "Output token throughput|TPOT median" "$R/$name.log" | tr -s ' ' | tr '\n' ' ')" | tee -a "$O/runs.log"; }
  B1=(--batch-size 1 --input-len 32 --output-len 128 --num-prompts 4 --runs 3)
  SEED=(--batch-size 8 --input-len 32 --output-len 128 --num-prompts 200 --runs 1)
  for q in ${IB_QUANTS:-awq gptq nf4}; do run "b1_$q" 90 --quantization "$q" "${B1[@]}"; done
  for q in ${IB_SEED_QUANTS:-awq}; do run "seed_$q" 120 --quantization "$q" "${SEED[@]}"; done
  P=$(readlink -f "$B/bench/gpu/libib_kernel_profile.so")
  [ "${IB_SKIP_PROFILE:-0}" = 1 ] || IB_KERNEL_PROFILE=$O/profile_awq_b1.txt LD_PRELOAD=$P timeout -s INT 60 "$B/bin/inferbench" run \
    --device cuda --dtype bf16 --load-format dummy --model llama-3-8b --quantization awq \
    --disable-tqdm --batch-size 1 --input-len 32 --output-len 128 --num-prompts 2 --runs 1 \
    --result-dir /tmp/prof-awq --overwrite > "$R/prof_awq.log" 2>&1
  echo "profile rc=$? $(el)"; sed -n 1,14p "$O/profile_awq_b1.txt" 2>/dev/null | cut -c1-150
  python3 bench/gpu/runs_json.py "$R" > "$O/runs.json"
  rm -f "$R"/*/requests.jsonl "$R"/*/allocations.csv "$R"/*/memory.csv
fi
# At most 8 files come back: the rest in extra.tgz.
( cd "$O" && ls | grep -vE '^(tests.log|backend_cuda_test.json|engine_cuda_test.json|ops.json|qc.log|runs.json|runs.log|pack_check.log|profile_awq_b1.txt)$'   | xargs -r tar czf extra.tgz --remove-files )
echo "done $(el)"
