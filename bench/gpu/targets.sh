#!/usr/bin/env bash
# The open issues' performance figures at the tree's defaults, in one call, on binaries already in
# $B (IB_PREBUILT=1 unpacks bench/gpu/prebuilt.sh's bundle; IB_SKIP_BUILD=1 takes a warm
# machine's). Llama-3-8B on dummy weights unless named; each run's issue and target in its name's
# comment below (the targets are H200 figures: on another card compare shares of the copy ceiling,
# which every result.json records).
#   cont_{bf16,fp8}_N  1,024 prompts of 128 / 128, continuous (issue 15: bf16 18,000 output tok/s;
#                      issue 13: fp8 25,000)
#   cont_fp8kv8_N      the same in fp8 with the E4M3 KV cache too (vLLM's --kv-cache-dtype fp8),
#                      reported beside cont_fp8 for issue 13
#   prof_cont_bf16     the bf16 continuous run under the CUPTI kernel tracer (kernel_profile.cpp):
#                      per-kernel totals over the run, and a timeline of its last 3,000 kernels
#   b1_{fp8,int8,awq}  batch 1, 32 / 128, 3 runs (issue 13: fp8 440, int8 400; issue 14: awq 600)
#   seed_{fp8,awq}     the seed protocol: batch 8, 32 / 128, 200 prompts (issue 13: 3,000; issue
#                      14: 4,000)
#   seed_base_N, seed_lora1_N  the seed protocol without and with one random rank-16 adapter on
#                      every linear layer, interleaved (issue 16: <= 15 % overhead)
#   v2lite_seed        DeepSeek-V2-Lite bf16 on the seed protocol (issue 15: 2,000)
#   prof_v2lite_seed   the same under the CUPTI kernel tracer, with a timeline of its last 3,000
#                      kernels (section v2prof, not in the default list)
#   prof_seed_lora1    seed_lora1 under the tracer, its timeline the last several decode steps
#                      (section loraprof, not in the default list; prof_lora.tgz)
# Usage (carry .deps/icu.tar.xz and .deps/prebuilt.tar.xz; ~5 minutes): IB_PREBUILT=1 OUT=dir
# bash bench/gpu/targets.sh. IB_TARGETS picks sections (default "cont prof b1 seed lora v2lite").
# Writes runs.log, runs.json, runs.tgz, prof.tgz (and prof_v2.tgz, prof_lora.tgz).
set -u; T0=$(date +%s)
cd "$(dirname "$0")/../.."; O=${OUT:-$PWD/gpu-out}; mkdir -p "$O"
source bench/gpu/build_inferbench.sh && head_setup
R=$O/runs; mkdir -p "$R"
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem --format=csv | tee "$O/runs.log"
CONT=(--input-len 128 --output-len 128 --num-prompts 1024 --load-mode open --num-warmups 16 --runs 1)
B1=(--batch-size 1 --input-len 32 --output-len 128 --num-prompts 4 --runs 3)
SEED=(--batch-size 8 --input-len 32 --output-len 128 --num-prompts 200 --runs 1 --load-mode static
  --max-model-len 4096 --seed 0)
A=/tmp/ib-adapters/l3-r16-0
has() { [[ " ${IB_TARGETS:-cont prof b1 seed lora v2lite} " == *" $1 "* ]]; }
# traced DIR TAG RUNNER NAME [ARGS...]: RUNNER (run_llama or v2lite) NAME with the CUPTI tracer
# preloaded (kernel_profile.cpp): per-kernel totals over the run (DIR/profile_TAG.txt) and a
# timeline of its last 3,000 kernels (DIR/timeline_TAG.csv), packed into DIR.tgz.
traced() {
  local dir=$1 tag=$2 runner=$3 name=$4 lib=$B/bench/gpu/libib_kernel_profile.so
  shift 4
  [ -f "$lib" ] || { echo "$name skipped: $lib missing (rebuild the bundle)"; return; }
  mkdir -p "$O/$dir"
  "$runner" "$name" IB_KERNEL_PROFILE="$O/$dir/profile_$tag.txt" \
    IB_KERNEL_TIMELINE="$O/$dir/timeline_$tag.csv" IB_KERNEL_TIMELINE_COUNT=3000 \
    LD_PRELOAD="$(readlink -f "$lib")" "$@"
  head -40 "$O/$dir/profile_$tag.txt"
  tar czf "$O/$dir.tgz" -C "$O" "$dir" && rm -rf "${O:?}/$dir"
}
# lora_adapter: the random rank-16 adapter on every linear layer of Llama-3-8B at $A, once.
lora_adapter() {
  [ -f $A/adapter_model.safetensors ] ||
    python3 tools/make_lora.py --hidden-size 4096 --intermediate-size 14336 --num-heads 32 \
      --num-kv-heads 8 --layers 32 --rank 16 --seed 0 --numpy --out $A > /dev/null
}
# v2lite NAME [VAR=value...]: DeepSeek-V2-Lite bf16 on the seed protocol, with those variables.
v2lite() {
  local name=$1
  shift
  if (( $(date +%s) - T0 > DEADLINE - 90 )); then echo "$name skipped (deadline)"; return; fi
  env "$@" timeout 120 "$B/bin/inferbench" run --device cuda --dtype bf16 --load-format dummy \
    --disable-tqdm --model deepseek-v2-lite "${SEED[@]}" --result-dir "$R/$name" --overwrite \
    > "$R/$name.log" 2>&1
  echo "$name rc=$? +$(( $(date +%s) - T0 )) s $(grep -E "Output token throughput|TPOT median" \
    "$R/$name.log" | tr -s ' ' | tr '\n' ' ')"
}
{
  if has cont; then
    run_llama cont_bf16_1 "${CONT[@]}"
    run_llama cont_fp8_1 --quantization fp8 "${CONT[@]}"
    run_llama cont_bf16_2 "${CONT[@]}"
    run_llama cont_fp8_2 --quantization fp8 "${CONT[@]}"
    run_llama cont_fp8kv8_1 --quantization fp8 --kv-cache-dtype fp8 "${CONT[@]}"
    run_llama cont_fp8kv8_2 --quantization fp8 --kv-cache-dtype fp8 "${CONT[@]}"
  fi
  has prof && traced prof cont_bf16 run_llama prof_cont_bf16 "${CONT[@]}"
  if has b1; then
    for q in fp8 int8 awq; do run_llama "b1_$q" --quantization $q "${B1[@]}"; done
  fi
  if has seed; then
    for q in fp8 awq; do run_llama "seed_$q" --quantization $q "${SEED[@]}"; done
  fi
  if has lora; then
    lora_adapter
    for i in 1 2; do
      run_llama "seed_base_$i" "${SEED[@]}"
      run_llama "seed_lora1_$i" "${SEED[@]}" --enable-lora --max-loras 1 --max-lora-rank 16 \
        --lora-modules a0=$A
    done
  fi
  has v2lite && v2lite v2lite_seed
  if has loraprof; then
    lora_adapter
    traced prof_lora seed_lora1 run_llama prof_seed_lora1 "${SEED[@]}" --enable-lora \
      --max-loras 1 --max-lora-rank 16 --lora-modules a0=$A
  fi
  has v2prof && traced prof_v2 v2lite_seed v2lite prof_v2lite_seed
} 2>&1 | tee -a "$O/runs.log"
pack_runs
echo "done +$(( $(date +%s) - T0 )) s"
