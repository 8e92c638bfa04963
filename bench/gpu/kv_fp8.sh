#!/usr/bin/env bash
# The FP8 KV cache on the H200 (issue 13): what --kv-cache-dtype fp8 buys against the bf16 cache
# on Llama-3-8B (dummy weights, bf16 activations). Needs a built inferbench (IB_BIN).
#  1. sweep --find-oom at --memory-limit 24GiB, input 1,024, 8 steps: the largest batch each cache
#     dtype completes (the fp8 pool holds about twice the tokens);
#  2. long context throughput: 64 prompts of 4,096 tokens, 128 out, batch 32, both cache dtypes;
#     result.json's engine.engine.kv_tokens gives the tokens the pool held.
# Usage (GPU machine): IB_BIN=build/bin/inferbench OUT=dir bash bench/gpu/kv_fp8.sh
# Writes $OUT/kv/{oom-bf16,oom-fp8,long-bf16,long-fp8}/ and $OUT/kv.log (the summary).
set -u; T0=$(date +%s); el() { echo "+$(( $(date +%s) - T0 )) s"; }
IB=${IB_BIN:?set IB_BIN to the inferbench binary}; O=${OUT:-$PWD/gpu-out}/kv; mkdir -p "$O"
LOG="$O/../kv.log"
for kv in auto fp8; do
  name=$([ "$kv" = auto ] && echo bf16 || echo fp8)
  timeout -s INT 150 "$IB" sweep --find-oom --model llama-3-8b --device cuda --dtype bf16 \
    --load-format dummy --memory-limit 24GiB --input-lens 1024 --oom-steps 8 \
    --kv-cache-dtype "$kv" --result-dir "$O/oom-$name" > "$O/oom-$name.log" 2>&1
  echo "oom $name rc=$? $(el)" | tee -a "$LOG"
  cat "$O/oom-$name/oom.md" 2>/dev/null | tee -a "$LOG"
done
for kv in auto fp8; do
  name=$([ "$kv" = auto ] && echo bf16 || echo fp8)
  timeout -s INT 120 "$IB" run --model llama-3-8b --device cuda --dtype bf16 --load-format dummy \
    --disable-tqdm --batch-size 32 --input-len 4096 --output-len 128 --num-prompts 64 --runs 1 \
    --kv-cache-dtype "$kv" --result-dir "$O/long-$name" --overwrite > "$O/long-$name.log" 2>&1
  echo "long $name rc=$? $(el) $(grep -E "Output token throughput|TPOT median|KV cache" "$O/long-$name.log" | tr -s ' ' | tr '\n' ' ')" | tee -a "$LOG"
done
rm -f "$O"/*/requests.jsonl "$O"/*/allocations.csv "$O"/*/memory.csv
