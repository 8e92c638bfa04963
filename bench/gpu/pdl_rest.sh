#!/usr/bin/env bash
# IB_PDL=1 against the default 2 on what session 26's A/B (results/h200/defaults-pdl) left out:
# the LoRA decode (Llama-3-8B bf16, the seed protocol, the base and one random rank-16 adapter on
# every linear layer, issue 16's protocol) and DeepSeek-V2-Lite at batch 1 (3 runs), interleaved,
# IB_PASSES (2) times, with an already-built binary (IB_BIN: /tmp/ib-st/bin/inferbench, the seed
# table's build of bench/st_src, left by bench/gpu/seed_table.sh on the still-warm machine).
# Usage (carry .deps/icu.tar.xz): OUT=dir bash bench/gpu/pdl_rest.sh
# Environment: IB_DEADLINE_S (runs that would end past it are skipped; 560). Writes runs.log,
# runs.json (each run's result keys) and runs.tgz.
set -u; T0=$(date +%s)
cd "$(dirname "$0")/../.."; O=${OUT:-$PWD/gpu-out}; mkdir -p "$O"
source bench/gpu/build_inferbench.sh && use_icu
BIN=${IB_BIN:-/tmp/ib-st/bin/inferbench}
prebuilt_libs "$(dirname "$(dirname "$BIN")")"  # a bundle of bench/gpu/prebuilt.sh's, if it is one
[ -x "$BIN" ] || { echo "$BIN missing: run bench/gpu/seed_table.sh first, or set IB_BIN"; exit 2; }
R=$O/runs; mkdir -p "$R"
DEADLINE=${IB_DEADLINE_S:-560}
A=/tmp/ib-adapters/l3-r16-0
[ -f $A/adapter_model.safetensors ] ||
  python3 tools/make_lora.py --hidden-size 4096 --intermediate-size 14336 --num-heads 32 \
    --num-kv-heads 8 --layers 32 --rank 16 --seed 0 --numpy --out $A > /dev/null
echo "adapter +$(( $(date +%s) - T0 )) s"
SEED=(--batch-size 8 --input-len 32 --output-len 128 --num-prompts 200 --runs 1 --load-mode static
      --max-model-len 4096 --seed 0)
LORA=(--enable-lora --max-loras 1 --max-lora-rank 16 --lora-modules a0=$A)  # lora_ab.sh's
# v2lite NAME [VAR=value ...]: DeepSeek-V2-Lite bf16 at batch 1, 3 runs.
v2lite() {
  local name=$1; shift
  if (( $(date +%s) - T0 > DEADLINE - 60 )); then echo "$name skipped (deadline)"; return; fi
  env "$@" timeout 100 "$BIN" run --device cuda --dtype bf16 --load-format dummy --disable-tqdm \
    --model deepseek-v2-lite --max-model-len 4096 --batch-size 1 --input-len 32 --output-len 128 \
    --num-prompts 4 --runs 3 --result-dir "$R/$name" --overwrite > "$R/$name.log" 2>&1
  echo "$name rc=$? +$(( $(date +%s) - T0 )) s $(grep -E "Output token throughput|TPOT median" \
    "$R/$name.log" | tr -s ' ' | tr '\n' ' ')"
}
{
  for i in $(seq "${IB_PASSES:-2}"); do
    run_llama "seed_base_pdl2_$i" "${SEED[@]}"
    run_llama "seed_lora1_pdl2_$i" "${SEED[@]}" "${LORA[@]}"
    run_llama "seed_lora1_pdl1_$i" IB_PDL=1 "${SEED[@]}" "${LORA[@]}"
    run_llama "seed_base_pdl1_$i" IB_PDL=1 "${SEED[@]}"
    v2lite "b1_v2lite_pdl2_$i" IB_PDL=2
    v2lite "b1_v2lite_pdl1_$i" IB_PDL=1
  done
} 2>&1 | tee "$O/runs.log"
python3 bench/gpu/runs_json.py "$R" > "$O/runs.json"
find "$R" \( -name requests.jsonl -o -name allocations.csv -o -name memory.csv \) -delete
tar czf "$O/runs.tgz" -C "$O" runs && rm -rf "$R"
echo "done +$(( $(date +%s) - T0 )) s"
