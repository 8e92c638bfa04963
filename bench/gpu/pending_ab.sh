#!/usr/bin/env bash
# The pending A/Bs of session 44 in one call, for a visit that may get one machine start only
# (bench/NOTES.md "The next visit (session 44's end)"; each has its fuller script): their gpu
# tests, then the runs that decide each default, interleaved, most important first, each skipped
# past the deadline (IB_DEADLINE_S, 560 s). On binaries already in $B (IB_PREBUILT=1 unpacks
# bench/gpu/prebuilt.sh's bundle; IB_SKIP_BUILD=1 takes a warm machine's):
#   tests  backend_cuda_test CudaFusedLora* (IB_LORA_IN_GEMV=4 against 1 bit for bit),
#          *QuantizeSync* (IB_QUANT_SYNC against 0), *GemmBuckets* (IB_GEMM_TUNE's buckets) and
#          the switch report; engine_cuda_test CudaEngineLora at IB_LORA_IN_GEMV=4, then
#          CudaEngineQuant* with IB_QUANT_SYNC=2
#   lora   (bench/gpu/lora_ab.sh) Llama-3-8B bf16 seed protocol: the base, one rank-16 adapter at
#          IB_LORA_IN_GEMV 1 and 4, twice, the base again
#   sync   (bench/gpu/quant_sync.sh) batch 1 (32 / 128, 4 prompts, 3 runs) fp8 and awq at
#          IB_QUANT_SYNC 0, 1 and 2
#   tune   (bench/gpu/gemm_tune.sh) continuous bf16 (1,024 prompts of 128 / 128) at IB_GEMM_TUNE
#          0 and 1
# Usage (carry .deps/icu.tar.xz and .deps/prebuilt.tar.xz; ~9.5 minutes): IB_PREBUILT=1 OUT=dir
# bash bench/gpu/pending_ab.sh. IB_PENDING="tests lora sync tune" picks sections (a short call:
# "lora_tests lora", the LoRA tests and A/B alone, ~4 minutes). Writes tests.log,
# backend_cuda_test.json, engine_cuda_test.json, engine_cuda_test_sync.json, runs.log, runs.json,
# runs.tgz.
set -u; T0=$(date +%s)
cd "$(dirname "$0")/../.." || exit 1; O=${OUT:-$PWD/gpu-out}; mkdir -p "$O"
source bench/gpu/build_inferbench.sh && head_setup
R=$O/runs; mkdir -p "$R"
has() { [[ " ${IB_PENDING:-tests lora sync tune} " == *" $1 "* ]]; }
A=bench/adapters/l3-r16-0
has lora && [ ! -f $A/adapter_model.safetensors ] &&
  python3 tools/make_lora.py --hidden-size 4096 --intermediate-size 14336 --num-heads 32 \
    --num-kv-heads 8 --layers 32 --rank 16 --seed 0 --numpy --out $A > /dev/null &
SEED=(--batch-size 8 --input-len 32 --output-len 128 --num-prompts 200 --runs 1 --load-mode static
  --max-model-len 4096 --seed 0)
LORA=(--enable-lora --max-loras 1 --max-lora-rank 16 --lora-modules "a0=$A")
B1=(--batch-size 1 --input-len 32 --output-len 128 --num-prompts 4 --runs 3)
CONT=(--input-len 128 --output-len 128 --num-prompts 1024 --load-mode open --num-warmups 16
  --runs 1)
has lora_tests && gpu_tests '*CudaFusedLora*:*ReportsTheKernelSwitches*' '*CudaEngineLora*GEMV4*' |
  tee -a "$O/runs.log"
has tests && {
  gpu_tests '*CudaFusedLora*:*QuantizeSync*:*GemmBuckets*:*ReportsTheKernelSwitches*' \
    '*CudaEngineLora*GEMV4*'
  IB_QUANT_SYNC=2 timeout 150 "$B/src/engine/engine_cuda_test" --gtest_filter='*CudaEngineQuant*' \
    --gtest_output="json:$O/engine_cuda_test_sync.json" >> "$O/tests.log" 2>&1
  echo "engine_cuda_test (IB_QUANT_SYNC=2) rc=$? +$(( $(date +%s) - T0 )) s"
  grep -E "^\[  FAILED  \]|PASSED|FAILED TEST" "$O/tests.log" | tail -8
} 2>&1 | tee -a "$O/runs.log"
wait  # the adapter
{
  has lora && run_llama seed_base "${SEED[@]}"
  has lora && for pass in 1 2; do
    for v in 1 4; do
      run_llama "seed_lora1_m${v}_$pass" IB_LORA_IN_GEMV=$v "${SEED[@]}" "${LORA[@]}"
    done
  done
  has lora && run_llama seed_base2 "${SEED[@]}"
  has sync && for q in fp8 awq; do
    for v in 0 1 2; do run_llama "b1_${q}_s$v" IB_QUANT_SYNC=$v --quantization $q "${B1[@]}"; done
  done
  has tune && for v in 0 1; do run_llama "cont_tune$v" IB_GEMM_TUNE=$v "${CONT[@]}"; done
} 2>&1 | tee -a "$O/runs.log"
pack_runs
echo "done +$(( $(date +%s) - T0 )) s"
