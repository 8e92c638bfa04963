#!/usr/bin/env bash
# One visit to the GPU machine for the quantized GEMVs' cp.async weight ring (IB_GEMV_RING, issues
# 13 and 14): build; the gpu tests of the ring and the persistent grid against registers at one
# block per tile, bit for bit (CudaGemvPersist), of the 4-bit and 8-bit ops against the CPU oracle,
# the fused LoRA GEMVs and the switch report; the op benchmark's W4A16 section at 1-16 tokens
# (ring on and off in one process) and its FP8 section at each setting; then `inferbench run` on
# Llama-3-8B dummy weights at batch 1 for each format in IB_QUANTS with the ring off and on, and
# awq on the seed protocol; Nsight Compute on the W4A16 gate/up GEMV with the ring.
# With IB_GGUF=1 also the GGUF kernels' fused forms (the norm in the quantize kernel, the SwiGLU in
# the GEMV, programmatic dependent launch): CudaGguf and CudaEngineGguf, and Llama-3-8B's dummy
# weights in the Q4_K_M mix at batch 1 with the GGUF kernels' wide forms (IB_GGUF_WIDE=1) and
# without, the unfused ops with IB_GGUF_UNFUSED=1 (IB_FUSED=0), the seed protocol with
# IB_GGUF_SEED=1, and a CUPTI kernel profile at IB_PROFILE_WIDE (1).
# Usage (from the repository root, ~9 minutes; carry .deps/icu.tar.xz): OUT=dir bash bench/gpu/ring.sh
# IB_AWQ_WARPS="8 4 2" adds awq batch-1 runs at each IB_GEMV_INT4_WARPS; IB_OPS_INT4_WARPS=8,4,2
# times the op benchmark's W4A16 rows at each (IB_OPS_INT4_M, IB_OPS_RING pick its rows);
# IB_SASS=1 dumps the W4A16 SwiGLU ring kernels' SASS; IB_SKIP_GGUF_PROFILE=1; IB_GGUF_SKIP_WIDE=1;
# IB_NCU_SOURCE=1 and IB_NCU_WARPS (the Nsight Compute run's options, below); IB_AB, IB_AB_QUANT,
# IB_AB_SEED: A/B runs of any environment assignments (below).
# Environment: IB_BUILD_DIR (/tmp/ib-ring), IB_QUANTS ("awq fp8 nf4"), IB_TEST_FILTER,
# IB_ENGINE_FILTER, IB_SKIP_TESTS=1, IB_SKIP_NCU=1, IB_SKIP_SEED=1, IB_SEED_RINGS ("1"),
# IB_SKIP_FP8_OPS=1, IB_SKIP_OPS=1 (both op benchmark sections), IB_GGUF=1.
# Writes tests.log, backend_cuda_test.json, engine_cuda_test.json, ops.log, ncu.txt, runs.log,
# runs.json; the rest in extra.tgz.
set -u; T0=$(date +%s); el() { echo "+$(( $(date +%s) - T0 )) s"; }
cd "$(dirname "$0")/../.."; O=${OUT:-$PWD/gpu-out}; mkdir -p "$O"
source bench/gpu/build_inferbench.sh && use_icu
B=${IB_BUILD_DIR:-/tmp/ib-ring}
GG=; [ "${IB_GGUF:-0}" = 1 ] && GG=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$O/env.txt" 2>&1
build_gpu_tests "$B" "$O/build.log" inferbench backend_cuda_test engine_cuda_test ib_ops_bench \
  ${GG:+ib_kernel_profile} ||
  { cp "$O/build.log" "$O/tests.log"; exit 1; }
echo "built $(el)"
if [ "${IB_SKIP_TESTS:-0}" != 1 ]; then
  timeout 240 "$B/src/backend/cuda/backend_cuda_test" \
    --gtest_filter="${IB_TEST_FILTER:-*CudaGemvPersist*:*CudaQuant4.*:*CudaQuant.*:*CudaFusedLora*:*ReportsTheKernelSwitches*}${GG:+:*CudaGguf*}" \
    --gtest_output="json:$O/backend_cuda_test.json" > "$O/tests.log" 2>&1
  echo "backend_cuda_test rc=$? $(el)"
  timeout 150 "$B/src/engine/engine_cuda_test" --gtest_filter="${IB_ENGINE_FILTER:-*CudaEngineQuant*}${GG:+:*CudaEngineGguf*}" \
    --gtest_output="json:$O/engine_cuda_test.json" >> "$O/tests.log" 2>&1
  echo "engine_cuda_test rc=$? $(el)"
  grep -E "^\[  FAILED  \]|Failure|Expected|Which is|PASSED|FAILED TEST" "$O/tests.log" | head -30
fi
OPS=$B/bench/gpu/ib_ops_bench
[ "${IB_SKIP_OPS:-0}" = 1 ] || IB_OPS_SECTIONS=gemm_int4 IB_OPS_INT4_M=${IB_OPS_INT4_M:-1,2,4,8,16} \
  IB_OPS_RING=${IB_OPS_RING:-0,1} IB_OPS_INT4_WARPS=${IB_OPS_INT4_WARPS:-8} timeout 150 "$OPS" \
  "$O/ops_int4.json" > "$O/ops.log" 2>&1
echo "ops int4 rc=$? $(el)"
for ring in 0 1; do
  [ "${IB_SKIP_FP8_OPS:-0}" = 1 ] || [ "${IB_SKIP_OPS:-0}" = 1 ] && break
  IB_GEMV_RING=$ring IB_OPS_SECTIONS=gemm_fp8 timeout 120 "$OPS" "$O/ops_fp8_r$ring.json" \
    > "$O/ops_fp8_r$ring.log" 2>&1
  echo "ops fp8 ring=$ring rc=$? $(el)"
  sed "s/^/ring=$ring /" "$O/ops_fp8_r$ring.log" | grep -E "per layer" >> "$O/ops.log"
done
[ -f "$O/ops.log" ] && grep -E "per layer|ceiling" "$O/ops.log"
R=$O/runs; mkdir -p "$R"
run() { local name=$1 ring=$2; shift 2
  IB_GEMV_RING=$ring timeout -s INT 100 "$B/bin/inferbench" run --device cuda --dtype bf16 \
    --load-format dummy --disable-tqdm --model llama-3-8b --result-dir "$R/$name" --overwrite "$@" \
    > "$R/$name.log" 2>&1
  echo "$name rc=$? $(el) $(grep -E "Output token throughput|TPOT median|rror" "$R/$name.log" | tr -s ' ' | tr '\n' ' ')" | tee -a "$O/runs.log"; }
B1=(--batch-size 1 --input-len 32 --output-len 128 --num-prompts 4 --runs 3)
SEED=(--batch-size 8 --input-len 32 --output-len 128 --num-prompts 200 --runs 1)
for q in ${IB_QUANTS:-awq fp8 nf4}; do
  for ring in 0 1; do run "b1_${q}_r$ring" "$ring" --quantization "$q" "${B1[@]}"; done
done
# IB_AB="[QUANT:]VAR=a [QUANT:]VAR=b ...": a batch-1 run of QUANT (IB_AB_QUANT, awq; none: bf16)
# with each assignment in its environment (b1_awq_VAR_a, ...), and with IB_AB_SEED=1 the seed
# protocol too.
for ab in ${IB_AB:-}; do
  (
    q=${IB_AB_QUANT:-awq}
    case $ab in *:*) q=${ab%%:*}; ab=${ab#*:} ;; esac
    export "$ab"
    run "b1_${q}_${ab//=/_}" 1 --quantization "$q" "${B1[@]}"
    [ "${IB_AB_SEED:-0}" = 1 ] && run "seed_${q}_${ab//=/_}" 1 --quantization "$q" "${SEED[@]}"
  )
done
# The W4A16 ring GEMVs' warps per block (IB_GEMV_INT4_WARPS) at batch 1.
for w in ${IB_AWQ_WARPS:-}; do
  IB_GEMV_INT4_WARPS=$w run "b1_awq_w$w" 1 --quantization awq "${B1[@]}"
done
if [ -n "$GG" ]; then
  run b1_gguf 1 --quantization gguf "${B1[@]}"
  [ "${IB_GGUF_SKIP_WIDE:-0}" = 1 ] || IB_GGUF_WIDE=1 run b1_gguf_wide 1 --quantization gguf "${B1[@]}"
  [ "${IB_GGUF_UNFUSED:-0}" = 1 ] && IB_FUSED=0 run b1_gguf_unfused 1 --quantization gguf "${B1[@]}"
  if [ "${IB_GGUF_SEED:-0}" = 1 ]; then
    run seed_gguf 1 --quantization gguf "${SEED[@]}"
    IB_GGUF_WIDE=1 run seed_gguf_wide 1 --quantization gguf "${SEED[@]}"
  fi
  # A CUPTI kernel profile (bench/gpu/kernel_profile.cpp) at batch 1 (IB_GGUF_WIDE=IB_PROFILE_WIDE).
  [ "${IB_SKIP_GGUF_PROFILE:-0}" = 1 ] || IB_GGUF_WIDE=${IB_PROFILE_WIDE:-1} IB_KERNEL_PROFILE="$O/profile_gguf_b1.txt" LD_PRELOAD=$(readlink -f "$B/bench/gpu/libib_kernel_profile.so") \
    timeout 100 "$B/bin/inferbench" run --device cuda --dtype bf16 --load-format dummy --disable-tqdm \
    --model llama-3-8b --quantization gguf --batch-size 1 --input-len 32 --output-len 64 \
    --num-prompts 2 --runs 1 --result-dir "$R/prof_gguf_b1" --overwrite > "$R/prof_gguf_b1.log" 2>&1
  echo "prof_gguf_b1 rc=$? $(el)"; [ -f "$O/profile_gguf_b1.txt" ] && head -30 "$O/profile_gguf_b1.txt"
fi
if [ "${IB_SKIP_SEED:-0}" != 1 ]; then
  for ring in ${IB_SEED_RINGS:-1}; do run "seed_awq_r$ring" "$ring" --quantization awq "${SEED[@]}"; done
fi
if [ "${IB_SKIP_NCU:-0}" != 1 ]; then
  # IB_NCU_SOURCE=1: also the source counters, the per-instruction SASS table with its warp
  # stalls (ncu_source.csv.gz) and every collected metric, the stall reasons among them
  # (ncu_raw.csv.gz). IB_NCU_WARPS: the kernel's IB_GEMV_INT4_WARPS (8).
  src=(); [ "${IB_NCU_SOURCE:-0}" = 1 ] && src=(--section SourceCounters --export /tmp/ncu-int4 --force-overwrite)
  IB_GEMV_INT4_WARPS=${IB_NCU_WARPS:-8} IB_OPS_SECTIONS=gemm_int4 IB_OPS_INT4_M=1 IB_OPS_RING=1 \
    IB_OPS_LINEARS=gate_up timeout 150 \
    ncu --clock-control none -k regex:gemv_kernel --launch-skip 4 --launch-count 1 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats \
    --section Occupancy --section LaunchStats --section SchedulerStats "${src[@]}" \
    "$OPS" /tmp/ncu-ops.json > "$O/ncu.txt" 2>&1
  echo "ncu rc=$? $(el)"
  if [ "${IB_NCU_SOURCE:-0}" = 1 ]; then
    timeout 60 ncu -i /tmp/ncu-int4.ncu-rep --page source --csv --print-source sass 2> \
      "$O/ncu_source.err" | gzip > "$O/ncu_source.csv.gz"
    timeout 60 ncu -i /tmp/ncu-int4.ncu-rep --page raw --csv 2>> "$O/ncu_source.err" |
      gzip > "$O/ncu_raw.csv.gz"
    echo "ncu pages: $(zcat "$O/ncu_source.csv.gz" | wc -l) source lines $(el)"
  fi
fi
# The SASS of the bf16 W4A16 SwiGLU ring GEMVs at 8, 4 and 2 warps per block (instruction counts).
[ "${IB_SASS:-0}" = 1 ] && python3 bench/gpu/sass_dump.py \
  "$B/src/backend/cuda/CMakeFiles/ib_backend_cuda.dir/gemv.cu.o" \
  'gemv_kernel<__nv_bfloat16, __nv_bfloat16, 1, [842], 2, false, 2, false, 4, ' |
  gzip > "$O/sass_int4_swiglu.txt.gz"
python3 bench/gpu/runs_json.py "$R" > "$O/runs.json"
rm -f "$R"/*/requests.jsonl "$R"/*/allocations.csv "$R"/*/memory.csv
# At most 8 files come back: the rest in extra.tgz.
( cd "$O" && ls | grep -vE '^(tests.log|backend_cuda_test.json|engine_cuda_test.json|ops.log|ncu.txt|runs.log|runs.json)$' |
  xargs -r tar czf extra.tgz --remove-files )
echo "done $(el)"
