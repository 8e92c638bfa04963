#!/usr/bin/env bash
# Where the batch-1 decode steps of the 8-bit and 4-bit formats go, and what the LoRA gate/up GEMV
# adds (issues 13, 14, 16), on binaries already in $B (IB_PREBUILT=1 unpacks bench/gpu/
# prebuilt.sh's bundle; IB_SKIP_BUILD=1 takes a warm machine's). Llama-3-8B on dummy weights:
#   prof_b1.tgz  batch 1 (32 / 128, 4 prompts, one run) in fp8, awq, int8 and bf16 under the CUPTI
#                tracer (kernel_profile.cpp): per-kernel totals (profile_FMT.txt) and the last
#                3,000 kernels (timeline_FMT.csv)
#   ncu.tgz      Nsight Compute (ncu_on's sections and SASS tables; stalls.txt from
#                sass_stalls.py) on one launch of each fp8 GEMV at 1 token (qkv, o, gate/up, down
#                of the 9th layer of a decode step), and on the bf16 fused gate/up GEMV at 8 tokens
#                without and with one rank-16 adapter on every linear layer (IB_LORA_IN_GEMV=1)
# IB_PROF_SECTIONS picks "b1 ncu8 nculora" (default all three). Usage (carry .deps/icu.tar.xz and
# .deps/prebuilt.tar.xz; ~6 minutes): IB_PREBUILT=1 OUT=dir bash bench/gpu/decode_prof.sh
set -u; T0=$(date +%s)
cd "$(dirname "$0")/../.." || exit 1; O=${OUT:-$PWD/gpu-out}; mkdir -p "$O"
source bench/gpu/build_inferbench.sh && head_setup
has() { [[ " ${IB_PROF_SECTIONS:-b1 ncu8 nculora} " == *" $1 "* ]]; }
late() { (( $(date +%s) - T0 > DEADLINE - ${1:-60} )); }
A=/tmp/ib-adapters/l3-r16-0
B1=(--batch-size 1 --input-len 32 --output-len 128 --num-prompts 4 --runs 1 --num-warmups 1)
# b1_traced FMT [FLAGS...]: batch 1 under the tracer into $P.
b1_traced() {
  local fmt=$1 lib
  shift
  if late 45; then echo "b1 $fmt skipped (deadline)"; return; fi
  lib=$(readlink -f "$B/bench/gpu/libib_kernel_profile.so")
  IB_KERNEL_PROFILE="$P/profile_$fmt.txt" IB_KERNEL_TIMELINE="$P/timeline_$fmt.csv" \
    IB_KERNEL_TIMELINE_COUNT=3000 LD_PRELOAD="$lib" timeout 100 "$B/bin/inferbench" run \
    --device cuda --dtype bf16 --load-format dummy --disable-tqdm --model llama-3-8b "${B1[@]}" \
    --result-dir "$P/run_$fmt" --overwrite "$@" > "$P/b1_$fmt.log" 2>&1
  echo "b1 $fmt rc=$? +$(( $(date +%s) - T0 )) s $(grep -E "Output token throughput|TPOT median" \
    "$P/b1_$fmt.log" | tr -s ' ' | tr '\n' ' ')"
  head -24 "$P/profile_$fmt.txt" | cut -c1-160
}
# ncu_fp8 NAME EPILOGUE SKIP: the fp8 GEMV of that epilogue (gemv_kernel.cuh: 1 residual, 2 SwiGLU,
# 3 RoPE/cache) at 1 token, the launch after SKIP of its instantiation.
ncu_fp8() {
  if late 90; then echo "ncu $1 skipped (deadline)"; return; fi
  ncu_prof "$1" "gemv_kernel<__nv_bfloat16, __nv_bfloat16, [^,]*1, [^,]*8, [^,]*4, [^,]*(false|0), [^,]*$2, [^,]*, [^,]*1, " \
    "$3" --batch-size 1 --input-len 32 --output-len 8 --num-prompts 1 --quantization fp8
}
{
  if has b1; then
    P=$O/prof_b1; mkdir -p "$P"
    b1_traced fp8 --quantization fp8
    b1_traced awq --quantization awq
    b1_traced int8 --quantization int8
    b1_traced bf16
    find "$P" \( -name requests.jsonl -o -name allocations.csv -o -name memory.csv \) -delete
    tar czf "$O/prof_b1.tgz" -C "$O" prof_b1 && rm -rf "$P"
  fi
  if has ncu8; then
    # Per decode step and layer: qkv (3), o (1), gate/up (2), down (1); 32 layers, prefill first.
    ncu_fp8 fp8_qkv 3 40
    ncu_fp8 fp8_o 1 80
    ncu_fp8 fp8_gate_up 2 40
    ncu_fp8 fp8_down 1 81
  fi
  if has nculora; then
    [ -f $A/adapter_model.safetensors ] ||
      python3 tools/make_lora.py --hidden-size 4096 --intermediate-size 14336 --num-heads 32 \
        --num-kv-heads 8 --layers 32 --rank 16 --seed 0 --numpy --out $A > /dev/null
    L8=(--batch-size 8 --input-len 32 --output-len 8 --num-prompts 8)
    late 90 || ncu_prof gate_up_base \
      'gemv_kernel<__nv_bfloat16, __nv_bfloat16, [^,]*1, [^,]*8, [^,]*2, [^,]*(false|0), [^,]*2, [^,]*(true|1), [^,]*0, [^,]*3, [^,]*(false|0)' \
      64 "${L8[@]}"
    late 90 || IB_LORA_IN_GEMV=1 ncu_prof gate_up_lora \
      'gemv_kernel<__nv_bfloat16, __nv_bfloat16, [^,]*1, [^,]*8, [^,]*2, [^,]*(false|0), [^,]*2, [^,]*(true|1), [^,]*0, [^,]*3, [^,]*(true|1)' \
      64 "${L8[@]}" --enable-lora --max-loras 1 --max-lora-rank 16 --lora-modules a0=$A
  fi
  if ls "$O"/sass_*.csv.gz > /dev/null 2>&1; then
    python3 bench/gpu/sass_stalls.py "$O"/sass_*.csv.gz > "$O/stalls.txt"
    cat "$O/stalls.txt"
    (cd "$O" && tar czf ncu.tgz ncu_*.txt sass_*.csv.gz stalls.txt &&
      rm -f ncu_*.txt sass_*.csv.gz stalls.txt)
  fi
} 2>&1 | tee -a "$O/prof.log"
echo "done +$(( $(date +%s) - T0 )) s"
