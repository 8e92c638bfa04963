#!/usr/bin/env bash
# An A/B of one LoRA kernel switch (issue 16) on the GPU machine: the gpu tests of the LoRA ops
# and the fused decode ops with LoRA (backend_cuda_test CudaLora*, CudaFusedLora*, CudaFused*;
# engine_cuda_test CudaEngineLora*: all with the defaults, the engine test also with
# IB_LORA_FUSED=1 and IB_LORA_IN_GEMV=0; their JSON reports), with IB_PARITY=1
# tools/hf_compare_lora.py against transformers + peft in cuda:bf16 (Llama-3 and Qwen2 shapes,
# r 8 and 64, prompts of 24 and 512), then Llama-3-8B bf16 on dummy weights at the seed protocol
# (static batches of 8, input 32 / output 128, 200 prompts), interleaved: the base, one random
# rank-16 adapter at each of the switch's values, 16 adapters at random at each (reversed), the
# base again; then a kernel timeline of the 1-adapter run with the defaults
# (bench/gpu/timeline_summary.py).
# Usage (~6-8 minutes of the machine; carry .deps/icu.tar.xz, and .deps/prebuilt.tar.xz with
# IB_PREBUILT=1, which takes bench/gpu/prebuilt.sh's binaries instead of a build here):
#   OUT=dir IB_AB=IB_LORA_IN_GEMV IB_AB_VALUES="1 3" bash bench/gpu/lora_ab.sh
# Environment: IB_AB (the switch), IB_AB_VALUES (each the switch's value, optionally followed by
# more settings after commas: "0 1 1,IB_LORA_ATTN=1"), IB_PARITY (0), IB_DEADLINE_S (520): runs that
# would end past it are skipped; IB_TIMELINE_ENV (VAR=value ... for the timeline run, e.g.
# IB_LORA_IN_GEMV=3); B (the build directory, /tmp/ib-lora-ab); IB_LORA_TESTS and
# IB_LORA_ENGINE_TESTS (the two gtest filters); IB_LORA16=0 (no 16-adapter runs); IB_OPS_LORA=1
# (after the tests, ib_ops_bench's lora section: the shrinks alone, ops.log and ops.json; with
# IB_OPS_SECTIONS, those sections instead, e.g. icache);
# IB_TIMELINE_BASE=1 (a timeline of the base model too, after the adapter's).
# Writes build.log, tests.log, runs.log, parity.log and lora_ab.tgz (result.json files, logs,
# test and parity JSON, timeline).
set -u; T0=$(date +%s); el() { echo "+$(( $(date +%s) - T0 )) s"; }
cd "$(dirname "$0")/../.."; O=${OUT:-$PWD/gpu-out}; mkdir -p "$O"
source bench/gpu/build_inferbench.sh
use_icu
AB=${IB_AB:-IB_LORA_IN_GEMV}
VALUES=(${IB_AB_VALUES:-1 3})
B=${B:-/tmp/ib-lora-ab}
if [ "${IB_PREBUILT:-0}" = 1 ]; then  # bench/gpu/prebuilt.sh's bundle, carried
  use_prebuilt
  prebuilt_libs "$B"
else
  build_gpu_tests $B "$O/build.log" inferbench backend_cuda_test engine_cuda_test \
    ib_kernel_profile $([ "${IB_OPS_LORA:-0}" = 1 ] && echo ib_ops_bench) || exit 1
  echo "built $(el)"
fi
R=/tmp/lora-ab-runs; rm -rf $R; mkdir -p $R
{ timeout 150 $B/src/backend/cuda/backend_cuda_test \
    --gtest_filter="${IB_LORA_TESTS:-*CudaLora*:*CudaFusedLora*:*CudaFused.*}" \
    --gtest_output=json:$R/backend_test.json
  echo "backend_cuda_test rc=$?"
  timeout 150 $B/src/engine/engine_cuda_test \
    --gtest_filter="${IB_LORA_ENGINE_TESTS:-*CudaEngineLora*}" \
    --gtest_output=json:$R/engine_test.json
  echo "engine_cuda_test rc=$?"; } > "$O/tests.log" 2>&1
grep -E "rc=|PASSED|FAILED|Failure" "$O/tests.log" | head -20
echo "tests $(el)"
if [ "${IB_OPS_LORA:-0}" = 1 ]; then
  IB_OPS_SECTIONS=${IB_OPS_SECTIONS:-lora} timeout 120 $B/bench/gpu/ib_ops_bench $R/ops.json \
    > "$O/ops.log" 2>&1
  echo "ops bench rc=$? $(el)"
  grep -E '^(lora|icache)' "$O/ops.log" | tr -s ' ' | cut -d' ' -f1-8
fi
A=bench/adapters; mkdir -p $A
for i in $(seq 0 $(( ${IB_LORA16:-1} == 1 ? 15 : 0 ))); do
  [ -f $A/l3-r16-$i/adapter_model.safetensors ] ||
    python3 tools/make_lora.py --hidden-size 4096 --intermediate-size 14336 --num-heads 32 \
      --num-kv-heads 8 --layers 32 --rank 16 --seed $i --numpy --out $A/l3-r16-$i > /dev/null &
done
wait
# A value of IB_AB_VALUES is the switch's value, then optionally more settings after commas
# (e.g. "1,IB_LORA_ATTN=1"): settings prints them as VAR=value words, tag names the run by them.
settings() { echo "$AB=${1%%,*}"; [[ $1 != *,* ]] || tr ',' ' ' <<< "${1#*,}"; }
tag() { tr ',=' '__' <<< "$1"; }
mods() { for i in $(seq 0 $(( $1 - 1 ))); do printf 'a%d=%s ' "$i" "$A/l3-r16-$i"; done; }
echo "adapters $(el)"
DEADLINE=${IB_DEADLINE_S:-520}
if [ "${IB_PARITY:-0}" = 1 ]; then
  PYTHONUNBUFFERED=1 timeout 150 python3 tools/hf_compare_lora.py --inferbench $B/bin/inferbench \
    --families llama-3,qwen2 --ranks 8,64 --runs cuda:bf16 --modes unmerged --prompt-lens 24,512 \
    --steps 8 --out $R/parity 2>&1 | grep -v Warning > "$O/parity.log"
  echo "hf_compare_lora rc=${PIPESTATUS[0]} $(el)"; tail -20 "$O/parity.log"
fi
SEED=(--batch-size 8 --input-len 32 --output-len 128 --num-prompts 200 --runs 1 --load-mode static
      --max-model-len 4096 --seed 0)
{
  echo "A/B of $AB"
  run_llama seed_base "${SEED[@]}"
  for v in "${VALUES[@]}"; do
    run_llama seed_lora1_$(tag "$v") $(settings "$v") "${SEED[@]}" --enable-lora --max-loras 1 \
      --max-lora-rank 16 --lora-modules $(mods 1)
  done
  for ((i = ${#VALUES[@]} - 1; i >= 0 && ${IB_LORA16:-1} == 1; i--)); do
    v=${VALUES[i]}
    run_llama seed_lora16_$(tag "$v") $(settings "$v") "${SEED[@]}" --enable-lora --max-loras 16 \
      --max-lora-rank 16 --lora-modules $(mods 16) --lora-assignment random
  done
  run_llama seed_base2 "${SEED[@]}"
} 2>&1 | tee "$O/runs.log"
if (( $(date +%s) - T0 < DEADLINE - 30 )); then
  llama_timeline lora1 $R ${IB_TIMELINE_ENV:-} --enable-lora --max-lora-rank 16 \
    --lora-modules "a0=$A/l3-r16-0"
fi
if [ "${IB_TIMELINE_BASE:-0}" = 1 ] && (( $(date +%s) - T0 < DEADLINE - 20 )); then
  llama_timeline base $R  # the base model's steps, for each kernel's advance with and without
fi
find $R -name '*.jsonl' -delete
tar czf "$O/lora_ab.tgz" -C $R .
echo "done $(el)"
