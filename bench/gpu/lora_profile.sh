#!/usr/bin/env bash
# Where LoRA's decode overhead goes (issue 16; bench/NOTES.md "LoRA on CUDA": one rank-16 adapter
# costs 31.6 % at the seed protocol where ~17 % was predicted, ~17 us per group update): kernel
# timelines (bench/gpu/kernel_profile.cpp) of Llama-3-8B bf16 on dummy weights at batch 8, the
# base on the fused path (the default), the base unfused (IB_FUSED=0, the path LoRA steps take)
# and one random rank-16 adapter on every linear layer, each summarised per decode step by role
# (bench/gpu/timeline_summary.py: the shrink and expand kernels by name).
# Usage (~3 minutes of the machine; carry .deps/icu.tar.xz): OUT=dir bash bench/gpu/lora_profile.sh
# Environment: B (build directory, /tmp/ib-vision-cuda, shared with the vision scripts).
# Writes build.log, runs.log (the summaries) and profiles.tgz (timelines, profiles, logs).
set -u; T0=$(date +%s); el() { echo "+$(( $(date +%s) - T0 )) s"; }
cd "$(dirname "$0")/../.."; O=${OUT:-$PWD/gpu-out}; mkdir -p "$O"
source bench/gpu/build_inferbench.sh
use_icu
B=${B:-/tmp/ib-vision-cuda}
build_gpu_tests $B "$O/lora-build.log" inferbench ib_kernel_profile || exit 1
echo "built $(el)"
A=bench/adapters/l3-r16-0
[ -f $A/adapter_model.safetensors ] ||
  python3 tools/make_lora.py --hidden-size 4096 --intermediate-size 14336 --num-heads 32 \
    --num-kv-heads 8 --layers 32 --rank 16 --seed 0 --numpy --out $A > /dev/null
PR=/tmp/lora-prof; rm -rf $PR; mkdir -p $PR
prof() { llama_timeline "$1" $PR "${@:2}"; }
prof base
prof base_unfused IB_FUSED=0
prof lora_r16 --enable-lora --max-lora-rank 16 --lora-modules "a0=$A"
tar czf "$O/profiles.tgz" -C $PR --exclude='*.jsonl' .
echo "done $(el)"
