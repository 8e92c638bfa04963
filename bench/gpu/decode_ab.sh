#!/usr/bin/env bash
# One visit to the GPU machine for an A/B of decode kernel switches on Llama-3-8B bf16 (issue 12's
# batch 1 and seed protocol) and Mixtral-8x7B (issue 15's 130 tok/s): build; the gpu tests
# (IB_BACKEND_TESTS, IB_ENGINE_TESTS); then Llama-3-8B on dummy weights, interleaved, at batch 1
# (3 runs) and on the seed's protocol (batch 8, 200 prompts, 1 run) for each set of switches in
# IB_AB_SETS, IB_PASSES times (2; 0: none); kernel timelines at batch 8 for each set in IB_TIMELINE_SETS;
# Mixtral-8x7B bf16 at batch 1 (3 runs) for each set in IB_MIXTRAL_SETS.
# Sets: ';' between sets, ',' within one ("IB_A=0;IB_A=1,IB_B=2"); a run is tagged by its set;
# "default" is the set of no variables (the binary's defaults). IB_LLAMA_FLAGS: more flags for
# every Llama-3-8B run (e.g. "--quantization fp8"; the runs' names do not show them).
# Usage (~9 minutes of the machine; carry .deps/icu.tar.xz): OUT=dir bash bench/gpu/decode_ab.sh
# bench/results/h200/attn-lean came from this script's first form (bench/gpu/attn_lean.sh at
# 4f68610), the same as: IB_AB_SETS="IB_ATTN_LEAN=0;IB_ATTN_LEAN=1;IB_ATTN_LEAN=2"
# IB_TIMELINE_SETS="IB_ATTN_LEAN=0;IB_ATTN_LEAN=1" IB_MIXTRAL_SETS="IB_ATTN_LEAN=0;IB_ATTN_LEAN=1".
# Environment: IB_DEADLINE_S (560: runs that would end past it are skipped), IB_SKIP_TESTS=1,
# IB_BUILD_DIR (/tmp/ib-ab), IB_SKIP_BUILD=1 (use the build an earlier call left there), IB_NCCL=1
# (build and run nccl_communicator_test too: nccl.log, nccl_communicator_test.json). Writes
# tests.log, backend_cuda_test.json, engine_cuda_test.json, runs.log, runs.json (each run's result
# keys) and runs.tgz (result directories, timelines).
set -u; T0=$(date +%s); el() { echo "+$(( $(date +%s) - T0 )) s"; }
cd "$(dirname "$0")/../.."; O=${OUT:-$PWD/gpu-out}; mkdir -p "$O"
source bench/gpu/build_inferbench.sh && use_icu
B=${IB_BUILD_DIR:-/tmp/ib-ab}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$O/env.txt" 2>&1
if [ "${IB_SKIP_BUILD:-0}" = 1 ] && [ -x "$B/bin/inferbench" ]; then
  echo "an earlier call's build in $B (the machine still warm)"
else
  build_gpu_tests "$B" "$O/build.log" inferbench backend_cuda_test engine_cuda_test \
    ib_kernel_profile || { cp "$O/build.log" "$O/tests.log"; exit 1; }
  echo "built $(el)"
fi
# IB_NCCL=1: also the NCCL communicator's gpu test (a group of the visible GPUs: one here).
if [ -n "${IB_NCCL:-}" ] && ! cmake --build "$B" -j "${JOBS:-16}" --target nccl_communicator_test \
    >> "$O/build.log" 2>&1; then
  echo "nccl_communicator_test not built (NCCL not found? build.log)"
elif [ -n "${IB_NCCL:-}" ]; then
  timeout 120 "$B/src/backend/cuda/nccl_communicator_test" \
    --gtest_output="json:$O/nccl_communicator_test.json" > "$O/nccl.log" 2>&1
  echo "nccl_communicator_test rc=$? $(grep -E "PASSED|FAILED" "$O/nccl.log" | tr '\n' ' ')"
fi
[ "${IB_SKIP_TESTS:-0}" = 1 ] ||
  gpu_tests "${IB_BACKEND_TESTS-*CudaAttention*:*CudaFused*:*ReportsTheKernelSwitches*}" \
    "${IB_ENGINE_TESTS-*CudaEngineTest*}"
R=$O/runs; mkdir -p "$R"
DEADLINE=${IB_DEADLINE_S:-560}
# sets VAR: the sets of $VAR as lines; tag SET: a run name's suffix (IB_A=0,IB_B=2 -> a0_b2).
sets() { tr ';' '\n' <<< "${!1-}" | sed '/^$/d'; }
tag() { local t=${1//IB_/}; t=${t//=/}; t=${t//,/_}; echo "${t,,}"; }
vars() { [ "$1" = default ] || echo "${1//,/ }"; }  # a set's variables, as words
read -ra XF <<< "${IB_LLAMA_FLAGS:-}"
mapfile -t AB < <(sets IB_AB_SETS)
[ ${#AB[@]} = 0 ] && AB=("IB_GEMV_QKV_BLOCKS=0" "IB_GEMV_QKV_BLOCKS=2")
B1=(--batch-size 1 --input-len 32 --output-len 128 --num-prompts 4 --runs 3 ${XF[@]+"${XF[@]}"})
SEED=(--batch-size 8 --input-len 32 --output-len 128 --num-prompts 200 --runs 1 ${XF[@]+"${XF[@]}"})
{
  for i in $(seq "${IB_PASSES:-2}"); do
    for s in "${AB[@]}"; do run_llama "b1_$(tag "$s")_$i" $(vars "$s") "${B1[@]}"; done
    for s in "${AB[@]}"; do run_llama "seed_$(tag "$s")_$i" $(vars "$s") "${SEED[@]}"; done
  done
} 2>&1 | tee "$O/runs.log"
while read -r s; do
  if (( $(date +%s) - T0 > DEADLINE - 40 )); then echo "timeline $s skipped" | tee -a "$O/runs.log"; continue; fi
  llama_timeline "b8_$(tag "$s")" "$R" $(vars "$s") ${XF[@]+"${XF[@]}"}
done < <(sets IB_TIMELINE_SETS)
# Mixtral-8x7B at batch 1: ~60 s a run with its load (a set may come twice: runs numbered).
n=0
while read -r s; do
  n=$((n + 1)); name=b1_mixtral_$(tag "$s")_$n
  if (( $(date +%s) - T0 > DEADLINE - 75 )); then echo "$name skipped" | tee -a "$O/runs.log"; continue; fi
  env $(vars "$s") timeout 100 "$B/bin/inferbench" run --device cuda --dtype bf16 \
    --load-format dummy --disable-tqdm --model mixtral-8x7b --batch-size 1 --input-len 32 \
    --output-len 128 --num-prompts 4 --runs 3 --result-dir "$R/$name" --overwrite \
    > "$R/$name.log" 2>&1
  echo "$name rc=$? $(el) $(grep -E "Output token throughput|TPOT median" "$R/$name.log" |
    tr -s ' ' | tr '\n' ' ')" | tee -a "$O/runs.log"
done < <(sets IB_MIXTRAL_SETS)
python3 bench/gpu/runs_json.py "$R" > "$O/runs.json"
find "$R" \( -name requests.jsonl -o -name allocations.csv -o -name memory.csv \) -delete
tar czf "$O/runs.tgz" -C "$O" runs && rm -rf "$R"
echo "done $(el)"
