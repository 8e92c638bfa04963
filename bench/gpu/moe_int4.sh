#!/usr/bin/env bash
# One visit to the GPU machine for Mixtral's 4-bit experts on CUDA (moe_int4.cu; issue 15's
# Mixtral-8x22B AWQ row): build; the gpu tests of the 4-bit expert kernels against the CPU op on
# their dequantized values (CudaMoeExperts.FourBit*), the 4-bit GEMV's (CudaQuant4, its weights now
# made by the shared test support), the small Mixtral engine in AWQ against the CPU engine
# (CudaEngineQuantMoe), the dense Mixtral engine cases (*_mixtral*, CudaEngineMoe) and the norm and
# switch tests; optionally tools/hf_compare.py on Gemma-2-9B's
# sizes (IB_GEMMA_PARITY=1: through IB_NORM_POST, now on by default); then `inferbench run` on
# mixtral-8x22b --quantization awq (dummy weights quantized at load) at batch 1 (3 runs) and on
# the seed protocol (batch 8, 200 prompts, 1 run; bench/seed-top5.yaml's row).
# Usage (from the repository root, ~9 minutes; carry .deps/icu.tar.xz): OUT=dir bash bench/gpu/moe_int4.sh
# Environment: IB_BUILD_DIR (/tmp/ib-int4), IB_SKIP_TESTS=1, IB_BACKEND_TESTS / IB_ENGINE_TESTS
# (the gtest filters; empty: that binary not built or run), IB_GEMMA_PARITY=1, IB_SKIP_SEED=1,
# IB_MODEL (mixtral-8x22b), IB_RUN_ENV (switches for every run), IB_AB_SETS (below),
# IB_PROFILE_ENV (switches for the profiled run), IB_PROFILE=1: a CUPTI kernel
# profile of a batch-1 run (profile_b1.txt; the per-step summary in runs.log).
# Writes tests.log, backend_cuda_test.json, engine_cuda_test.json, runs.log, runs.tgz (result.json
# and log per run), parity.log and hf_compare_gemma2_9b_cuda.json (with IB_GEMMA_PARITY=1): at
# most 8 files come back.
set -u; T0=$(date +%s); el() { echo "+$(( $(date +%s) - T0 )) s"; }
cd "$(dirname "$0")/../.."; O=${OUT:-$PWD/gpu-out}; mkdir -p "$O"
source bench/gpu/build_inferbench.sh && use_icu
B=${IB_BUILD_DIR:-/tmp/ib-int4}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$O/env.txt" 2>&1
BT=${IB_BACKEND_TESTS-*CudaMoeExperts*FourBit*:*CudaQuant4*:*NormAddRmsNorm*:*ReportsTheKernelSwitches*}
ET=${IB_ENGINE_TESTS-*CudaEngineQuantMoe*:*CudaEngineQuant*w4a16*:*_mixtral*:*CudaEngineMoe*}
TARGETS=(inferbench)
[ -n "$BT" ] && TARGETS+=(backend_cuda_test)
[ -n "$ET" ] && TARGETS+=(engine_cuda_test)
[ "${IB_PROFILE:-0}" = 1 ] && TARGETS+=(ib_kernel_profile)
build_gpu_tests "$B" "$O/build.log" "${TARGETS[@]}" || { cp "$O/build.log" "$O/tests.log"; exit 1; }
echo "built $(el)"
[ "${IB_SKIP_TESTS:-0}" = 1 ] || gpu_tests "$BT" "$ET"
if [ "${IB_GEMMA_PARITY:-0}" = 1 ]; then
  PYTHONUNBUFFERED=1 timeout 150 python3 tools/hf_compare.py --inferbench "$B/bin/inferbench" \
    --families gemma2 --runs cuda:fp32,cuda:bf16 --json-name hf_compare_gemma2_9b_cuda.json \
    --out "$O" 2>&1 | grep -v Warning > "$O/parity.log"
  echo "hf_compare gemma2 rc=${PIPESTATUS[0]} $(el)"; sed -n '/^| family/,$p' "$O/parity.log"
fi
R=$O/runs; mkdir -p "$R"
M=${IB_MODEL:-mixtral-8x22b}
# run NAME FLAGS...: one `inferbench run` of $M in AWQ 4-bit (bf16 activations) on dummy weights.
run() { local name=$1; shift
  env ${IB_RUN_ENV-} timeout -s INT 200 "$B/bin/inferbench" run --device cuda --dtype bf16 \
    --load-format dummy --quantization awq --disable-tqdm --model "$M" --result-dir "$R/$name" \
    --overwrite "$@" > "$R/$name.log" 2>&1
  echo "$name rc=$? $(el) $(grep -E "Output token throughput|TPOT median|copy ceiling|rror" "$R/$name.log" | tr -s ' ' | tr '\n' ' ')" | tee -a "$O/runs.log"; }
# IB_AB_SETS ("IB_MOE_INT4_RING=0;IB_MOE_INT4_RING=1"): a pass of the runs per set of switches
# (';' between sets, ',' within one; tagged b1_<model>_awq_moe_int4_ring1, ...); empty: one pass.
IFS=';' read -r -a SET_LIST <<< "${IB_AB_SETS-}"
[ ${#SET_LIST[@]} = 0 ] && SET_LIST=("")
for set in "${SET_LIST[@]}"; do
  tag=${set//IB_/}; tag=${tag//=/}; tag=${tag//,/_}; tag=${tag,,}; tag=${tag:+_$tag}
  IB_RUN_ENV="${IB_RUN_ENV-} ${set//,/ }" run "b1_${M}_awq$tag" --batch-size 1 --input-len 32 \
    --output-len 128 --num-prompts 4 --runs 3
  [ "${IB_SKIP_SEED:-0}" = 1 ] || IB_RUN_ENV="${IB_RUN_ENV-} ${set//,/ }" run "seed_${M}_awq$tag" \
    --batch-size 8 --input-len 32 --output-len 128 --num-prompts 200 --runs 1 --max-model-len 4096
done
if [ "${IB_PROFILE:-0}" = 1 ]; then
  env ${IB_RUN_ENV-} ${IB_PROFILE_ENV-} IB_KERNEL_PROFILE="$O/profile_b1.txt" IB_KERNEL_TIMELINE="$R/timeline_b1.csv" \
    IB_KERNEL_TIMELINE_COUNT=20000 LD_PRELOAD="$(readlink -f "$B/bench/gpu/libib_kernel_profile.so")" \
    timeout 150 "$B/bin/inferbench" run --device cuda --dtype bf16 --load-format dummy \
    --quantization awq --disable-tqdm --model "$M" --batch-size 1 --input-len 32 --output-len 128 \
    --num-prompts 2 --runs 1 --result-dir "$R/profile_run" --overwrite > "$R/profile_b1.log" 2>&1
  echo "profile rc=$? $(el)" | tee -a "$O/runs.log"
  python3 bench/gpu/step_summary.py "$R/timeline_b1.csv" | tee -a "$O/runs.log"
  head -30 "$O/profile_b1.txt"
fi
find "$R" \( -name requests.jsonl -o -name allocations.csv \) -delete
tar czf "$O/runs.tgz" -C "$O" runs && rm -rf "$R"
echo "done $(el)"
