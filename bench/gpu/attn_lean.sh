#!/usr/bin/env bash
# One visit to the GPU machine for the split-KV decode attention's lean form (IB_ATTN_LEAN, issue
# 12's seed protocol and issue 15's Mixtral-8x7B): build; the gpu tests of the attention against
# the CPU op under every form (CudaAttention: attention_error runs IB_ATTN_LEAN 0, 1 and 2;
# LeanFormRunsWhereItExists), the switch report and the engine cases (CudaEngineTest, its `_lean`
# cases with the switch on); then Llama-3-8B bf16 on dummy weights, interleaved, at batch 1
# (3 runs) and on the seed's protocol (batch 8, 200 prompts, 1 run) at IB_ATTN_LEAN 0, 1 and 2,
# twice each; kernel timelines at batch 8 with 0 and 1; Mixtral-8x7B bf16 at batch 1 with 0 and 1.
# Usage (~9 minutes of the machine; carry .deps/icu.tar.xz): OUT=dir bash bench/gpu/attn_lean.sh
# IB_DEADLINE_S (560): runs that would end past it are skipped; IB_LEAN_MODES ("0 1 2");
# IB_SKIP_TESTS=1; IB_SKIP_MIXTRAL=1. Writes tests.log, backend_cuda_test.json,
# engine_cuda_test.json, runs.log, runs.json (each run's result keys) and runs.tgz.
set -u; T0=$(date +%s); el() { echo "+$(( $(date +%s) - T0 )) s"; }
cd "$(dirname "$0")/../.."; O=${OUT:-$PWD/gpu-out}; mkdir -p "$O"
source bench/gpu/build_inferbench.sh && use_icu
B=${IB_BUILD_DIR:-/tmp/ib-lean}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$O/env.txt" 2>&1
build_gpu_tests "$B" "$O/build.log" inferbench backend_cuda_test engine_cuda_test \
  ib_kernel_profile || { cp "$O/build.log" "$O/tests.log"; exit 1; }
echo "built $(el)"
[ "${IB_SKIP_TESTS:-0}" = 1 ] ||
  gpu_tests '*CudaAttention*:*ReportsTheKernelSwitches*' '*CudaEngineTest*'
R=$O/runs; mkdir -p "$R"
DEADLINE=${IB_DEADLINE_S:-560}
MODES=(${IB_LEAN_MODES:-0 1 2})
B1=(--batch-size 1 --input-len 32 --output-len 128 --num-prompts 4 --runs 3)
SEED=(--batch-size 8 --input-len 32 --output-len 128 --num-prompts 200 --runs 1)
{
  for i in 1 2; do
    for m in "${MODES[@]}"; do run_llama b1_lean${m}_$i IB_ATTN_LEAN=$m "${B1[@]}"; done
    for m in "${MODES[@]}"; do run_llama seed_lean${m}_$i IB_ATTN_LEAN=$m "${SEED[@]}"; done
  done
} 2>&1 | tee "$O/runs.log"
for m in 0 1; do
  if (( $(date +%s) - T0 > DEADLINE - 40 )); then echo "timeline lean$m skipped"; continue; fi
  llama_timeline b8_lean$m "$R" IB_ATTN_LEAN=$m
done
# Mixtral-8x7B at batch 1 (issue 15's 130 tok/s): ~60 s a run with its load.
if [ "${IB_SKIP_MIXTRAL:-0}" != 1 ]; then
  for m in 0 1; do
    if (( $(date +%s) - T0 > DEADLINE - 75 )); then echo "mixtral lean$m skipped" | tee -a "$O/runs.log"; continue; fi
    IB_ATTN_LEAN=$m timeout 100 "$B/bin/inferbench" run --device cuda --dtype bf16 \
      --load-format dummy --disable-tqdm --model mixtral-8x7b --batch-size 1 --input-len 32 \
      --output-len 128 --num-prompts 4 --runs 3 --result-dir "$R/b1_mixtral_lean$m" --overwrite \
      > "$R/b1_mixtral_lean$m.log" 2>&1
    echo "b1_mixtral_lean$m rc=$? $(el) $(grep -E "Output token throughput|TPOT median" \
      "$R/b1_mixtral_lean$m.log" | tr -s ' ' | tr '\n' ' ')" | tee -a "$O/runs.log"
  done
fi
python3 bench/gpu/runs_json.py "$R" > "$O/runs.json"
find "$R" \( -name requests.jsonl -o -name allocations.csv -o -name memory.csv \) -delete
tar czf "$O/runs.tgz" -C "$O" runs && rm -rf "$R"
echo "done $(el)"
