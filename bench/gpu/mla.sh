#!/usr/bin/env bash
# One visit to the GPU machine for DeepSeek-V2 on CUDA (issue 15): build; the gpu tests of the MLA
# kernels, the grouped router and the fused norms against the CPU ops (CudaMla*, CudaMoeRoute*,
# CudaMoe*, *NormAddRmsNorm*), and the
# small Mixtral engine's CUDA tests (*_mixtral*, CudaEngineMoe);
# tools/hf_compare.py on deepseek-v2-tiny and deepseek-v2-lite (2 layers) against
# transformers on CUDA in fp32 and bf16; then `inferbench run` on DeepSeek-V2-Lite dummy weights in
# bf16 at batch 1 (3 runs) and on the seed protocol (batch 8, 200 prompts).
# Usage (from the repository root, ~8 minutes; carry .deps/icu.tar.xz): OUT=dir bash bench/gpu/mla.sh
# Environment: IB_BUILD_DIR (/tmp/ib-mla), IB_SKIP_TESTS=1, IB_SKIP_PARITY=1, IB_SKIP_SEED=1,
# IB_PARITY_RUNS (cuda:fp32,cuda:bf16; cuda:fp32,cuda:bf16,hf:bf16 adds transformers' own bf16
# run, teacher-forced on the CUDA bf16 tokens, as the baseline), IB_CPU_MAX_LEN
# (4096), IB_PROFILE=1: a CUPTI kernel profile of a batch-1 run (profile_b1.txt, timeline_b1.csv;
# IB_PROFILE_BATCH=8: of a batch-8 run, under the same names),
# IB_AB_SETS ("IB_MOE_TILES=0;IB_MOE_TILES=16"): sets of switches, ';' between sets and ',' within
# one, a pass of the runs per set (b1_deepseek-v2-lite_moe_tiles0, ...; empty: one pass with the
# defaults); IB_PARITY_ENV (e.g. "IB_MOE_TILES=16"): switches for the parity rows; IB_PROFILE_ENV:
# the same for the profiled run; IB_BATCHES ("2 4"): also V2-Lite at these
# batch sizes (1 run of 8 x batch prompts); IB_RUN_ENV: switches for every `inferbench run` (not
# the tests); IB_MIXTRAL=1: also Mixtral-8x7B at batch 1 per set (b1_mixtral-8x7b_*: the MoE
# expert kernels' other user); IB_B1_MODELS ("gemma-2-9b llama-3-8b"): these presets too at batch 1
# per set (b1_<model>_*: switches that reach beyond the MoE kernels).
# Writes tests.log, backend_cuda_test.json, parity.log, hf_compare_deepseek_v2_cuda.json,
# runs.log, runs.json, profile_b1.txt; the rest (engine_cuda_test.json, logs, run directories)
# in extra.tgz: at most 8 files come back.
set -u; T0=$(date +%s); el() { echo "+$(( $(date +%s) - T0 )) s"; }
cd "$(dirname "$0")/../.."; O=${OUT:-$PWD/gpu-out}; mkdir -p "$O"
source bench/gpu/build_inferbench.sh && use_icu
B=${IB_BUILD_DIR:-/tmp/ib-mla}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$O/env.txt" 2>&1
build_gpu_tests "$B" "$O/build.log" inferbench backend_cuda_test engine_cuda_test ib_kernel_profile || { cp "$O/build.log" "$O/tests.log"; exit 1; }
echo "built $(el)"
[ "${IB_SKIP_TESTS:-0}" = 1 ] ||
  gpu_tests '*CudaMla*:*CudaMoeRoute*:*CudaMoe*:*NormAddRmsNorm*:*ReportsTheKernelSwitches*' '*_mixtral*:*CudaEngineMoe*'
if [ "${IB_SKIP_PARITY:-0}" != 1 ]; then
  export PYTHONUNBUFFERED=1
  env ${IB_PARITY_ENV-} timeout 200 python3 tools/hf_compare.py --inferbench "$B/bin/inferbench" \
    --families deepseek-v2-tiny,deepseek-v2-lite --runs "${IB_PARITY_RUNS:-cuda:fp32,cuda:bf16}" \
    --cpu-max-len "${IB_CPU_MAX_LEN:-4096}" \
    --json-name hf_compare_deepseek_v2_cuda.json --out "$O/parity" 2>&1 | grep -v Warning > "$O/parity.log"
  echo "hf_compare rc=${PIPESTATUS[0]} $(el)"; tail -25 "$O/parity.log"
  [ -f "$O/parity/hf_compare_deepseek_v2_cuda.json" ] && mv "$O/parity/hf_compare_deepseek_v2_cuda.json" "$O/"
fi
R=$O/runs; mkdir -p "$R"
# run NAME FLAGS...: one `inferbench run` of $M (deepseek-v2-lite) in bf16 on dummy weights.
run() { local name=$1; shift
  env ${IB_RUN_ENV-} ${SET_ENV-} timeout -s INT 150 "$B/bin/inferbench" run --device cuda --dtype bf16 --load-format dummy \
    --disable-tqdm --model "${M:-deepseek-v2-lite}" --result-dir "$R/$name" --overwrite "$@" > "$R/$name.log" 2>&1
  echo "$name rc=$? $(el) $(grep -E "Output token throughput|TPOT median|rror" "$R/$name.log" | tr -s ' ' | tr '\n' ' ')" | tee -a "$O/runs.log"; }
SETS=${IB_AB_SETS-IB_MOE_TILES=0;IB_MOE_TILES=16}
IFS=';' read -r -a SET_LIST <<< "$SETS"
[ ${#SET_LIST[@]} = 0 ] && SET_LIST=("")  # one pass with the defaults
for set in "${SET_LIST[@]}"; do
  SET_ENV=${set//,/ }; tag=${set//IB_/}; tag=${tag//=/}; tag=${tag//,/_}; tag=${tag,,}
  tag=${tag:+_$tag}
  run "b1_deepseek-v2-lite$tag" --batch-size 1 --input-len 32 --output-len 128 --num-prompts 4 --runs 3
  for bs in ${IB_BATCHES-}; do
    run "b${bs}_deepseek-v2-lite$tag" --batch-size "$bs" --input-len 32 --output-len 128 \
      --num-prompts $((bs * 8)) --runs 1
  done
  [ "${IB_SKIP_SEED:-0}" = 1 ] || run "seed_deepseek-v2-lite$tag" --batch-size 8 --input-len 32 \
    --output-len 128 --num-prompts 200 --runs 1
  [ "${IB_MIXTRAL:-0}" = 1 ] && M=mixtral-8x7b run "b1_mixtral-8x7b$tag" --batch-size 1 \
    --input-len 32 --output-len 128 --num-prompts 4 --runs 3
  for m in ${IB_B1_MODELS-}; do
    M=$m run "b1_$m$tag" --batch-size 1 --input-len 32 --output-len 128 --num-prompts 4 --runs 3
  done
  unset SET_ENV
done
if [ "${IB_PROFILE:-0}" = 1 ]; then
  PB=${IB_PROFILE_BATCH:-1}  # the profile files keep their b1 names: mla.sh returns 8 files at most
  env ${IB_PROFILE_ENV-} IB_KERNEL_PROFILE="$O/profile_b1.txt" IB_KERNEL_TIMELINE="$O/timeline_b1.csv" \
    IB_KERNEL_TIMELINE_COUNT=20000 LD_PRELOAD="$(readlink -f "$B/bench/gpu/libib_kernel_profile.so")" \
    timeout 150 "$B/bin/inferbench" run --device cuda --dtype bf16 --load-format dummy --disable-tqdm \
    --model deepseek-v2-lite --batch-size "$PB" --input-len 32 --output-len 128 \
    --num-prompts $((2 * PB)) --runs 1 --result-dir "$O/profile_run" --overwrite > "$O/profile_b1.log" 2>&1
  echo "profile (batch $PB) rc=$? $(el)" | tee -a "$O/runs.log"
  python3 bench/gpu/step_summary.py "$O/timeline_b1.csv" | tee -a "$O/runs.log"
  head -40 "$O/profile_b1.txt"
fi
python3 bench/gpu/runs_json.py "$R" > "$O/runs.json"
rm -f "$R"/*/requests.jsonl "$R"/*/allocations.csv "$R"/*/memory.csv
( cd "$O" && ls | grep -vE '^(tests.log|backend_cuda_test.json|parity.log|hf_compare_deepseek_v2_cuda.json|runs.log|runs.json|profile_b1.txt)$' |
  xargs -r tar czf extra.tgz --remove-files )
echo "done $(el)"
