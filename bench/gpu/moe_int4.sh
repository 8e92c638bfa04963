#!/usr/bin/env bash
# One visit to the GPU machine for Mixtral's 4-bit experts on CUDA (moe_int4.cu; issue 15's
# Mixtral-8x22B AWQ row): build; the gpu tests of the 4-bit expert kernels against the CPU op on
# their dequantized values (CudaMoeExperts.FourBit*), the 4-bit GEMV's (CudaQuant4, its weights now
# made by the shared test support), the small Mixtral engine in AWQ against the CPU engine
# (CudaEngineQuantMoe) and the norm and switch tests; optionally tools/hf_compare.py on Gemma-2-9B's
# sizes (IB_GEMMA_PARITY=1: through IB_NORM_POST, now on by default); then `inferbench run` on
# mixtral-8x22b --quantization awq (dummy weights quantized at load) at batch 1 (3 runs) and on
# the seed protocol (batch 8, 200 prompts, 1 run; bench/seed-top5.yaml's row).
# Usage (from the repository root, ~9 minutes; carry .deps/icu.tar.xz): OUT=dir bash bench/gpu/moe_int4.sh
# Environment: IB_BUILD_DIR (/tmp/ib-int4), IB_SKIP_TESTS=1, IB_GEMMA_PARITY=1, IB_SKIP_SEED=1,
# IB_MODEL (mixtral-8x22b), IB_RUN_ENV (switches for every run).
# Writes tests.log, backend_cuda_test.json, engine_cuda_test.json, runs.log, runs/ (result.json
# and log per run), parity.log and hf_compare_gemma2_9b_cuda.json (with IB_GEMMA_PARITY=1).
set -u; T0=$(date +%s); el() { echo "+$(( $(date +%s) - T0 )) s"; }
cd "$(dirname "$0")/../.."; O=${OUT:-$PWD/gpu-out}; mkdir -p "$O"
source bench/gpu/build_inferbench.sh && use_icu
B=${IB_BUILD_DIR:-/tmp/ib-int4}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$O/env.txt" 2>&1
build_gpu_tests "$B" "$O/build.log" inferbench backend_cuda_test engine_cuda_test || { cp "$O/build.log" "$O/tests.log"; exit 1; }
echo "built $(el)"
[ "${IB_SKIP_TESTS:-0}" = 1 ] ||
  gpu_tests '*CudaMoeExperts*FourBit*:*CudaQuant4*:*NormAddRmsNorm*:*ReportsTheKernelSwitches*' \
    '*CudaEngineQuantMoe*:*CudaEngineQuant*w4a16*'
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
run "b1_${M}_awq" --batch-size 1 --input-len 32 --output-len 128 --num-prompts 4 --runs 3
[ "${IB_SKIP_SEED:-0}" = 1 ] || run "seed_${M}_awq" --batch-size 8 --input-len 32 \
  --output-len 128 --num-prompts 200 --runs 1 --max-model-len 4096
find "$R" \( -name requests.jsonl -o -name allocations.csv \) -delete
echo "done $(el)"
