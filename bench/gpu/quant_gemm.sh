#!/usr/bin/env bash
# The weight-only quantized formats' tensor-core GEMM (IB_QUANT_GEMM, src/backend/cuda/
# quant_gemm.cu) on the H200: build (the tree's HEAD into the build directory bench/gpu/
# moe_gemm.sh and attn_mma.sh share, so on a warm machine after them it builds nothing); the gpu
# tests against the CPU oracle (CudaQuant4*: every 4-bit variant through the GEMM, TensorCore
# GemmMatchesTheDefinition; CudaQuant*: W8A16's) and the engine's quantized tests with
# IB_QUANT_GEMM=8192 (every prefill past 16 tokens on the GEMM, graphs and eager, against the CPU
# engine); then Llama-3-8B on dummy weights quantized at load, IB_QUANT_GEMM=0 (the weight
# dequantized into a bf16 scratch for cuBLASLt on every matmul past the GEMV) against 8192 (every
# such matmul on the GEMM), interleaved, so that each run's token count says where the GEMM wins
# (the default then takes the crossover):
#   awq_c64     awq, 512 prompts of 128 / 128, 64 at a time (closed loop): steps of ~64-300 tokens
#   int8_c64    int8 (W8A16), the same
#   awq_seed    awq, the seed protocol (batch 8, 32 / 128, 200 prompts): prefills of 256
#   awq_cont    awq, 512 prompts of 128 / 128, all at once: decode batches of up to 512 tokens
#   int8_cont   int8, the same (7,872 output tok/s on 1,024 prompts in int8/run2)
#   awq_pre128  awq, batch 8, 128 in / 8 out, 64 prompts: prefills of 1,024 tokens
#   awq_pre512  awq, batch 8, 512 in / 8 out, 32 prompts: prefills of 4,096 tokens (TTFT)
#   nf4_pre128  nf4, as awq_pre128
# Before the runs, the kernels alone (ib_ops_bench's gemm_int4 section: each linear at 17-4,096
# tokens, IB_QUANT_GEMM=0 against 8192; ops.json, ops.log; IB_SKIP_OPS=1 skips it).
# Usage (carry .deps/icu.tar.xz; ~10 minutes of runs, plus ~5 for a build): OUT=dir bash
# bench/gpu/quant_gemm.sh, then what the deadline skipped with IB_SKIP_BUILD=1 IB_SKIP_TESTS=1
# IB_RUNS_LIST=.... Environment: IB_BUILD_DIR (/tmp/ib-head), IB_SKIP_BUILD=1, IB_SKIP_TESTS=1,
# IB_SETS ("IB_QUANT_GEMM=0 IB_QUANT_GEMM=8192"), IB_RUNS_LIST (the eight above), IB_DEADLINE_S
# (560: runs that would end past it are skipped). Writes ops.json, ops.log, tests.log,
# backend_cuda_test.json, engine_cuda_test.json, runs.log, runs.json and runs.tgz (the build log
# and every run's directory).
set -u; T0=$(date +%s); el() { echo "+$(( $(date +%s) - T0 )) s"; }
cd "$(dirname "$0")/../.."; O=${OUT:-$PWD/gpu-out}; mkdir -p "$O"
IB_EXTRA_TARGETS=${IB_EXTRA_TARGETS:-ib_ops_bench}
source bench/gpu/build_inferbench.sh && head_setup
# The engine against the CPU engine on the same quantized weights, prefills on the GEMM.
head_tests '*CudaQuant4*:*CudaQuant.*:*ReportsTheKernelSwitches*' IB_QUANT_GEMM=8192 \
  '*CudaEngineQuant*'
# The kernels alone (unless IB_SKIP_OPS=1): each Llama-3-8B linear at 17-4,096 tokens, the GEMM
# against the dequantizing path, timed over graph replays (ops_bench_int4.cpp); ops.json.
if [ "${IB_SKIP_OPS:-0}" != 1 ] && [ -x "$B/bench/gpu/ib_ops_bench" ]; then
  IB_OPS_SECTIONS=gemm_int4 IB_OPS_QUANT_GEMM=0,8192 \
    IB_OPS_INT4_M=${IB_OPS_INT4_M:-17,32,64,128,256,512,1024,4096} \
    timeout 120 "$B/bench/gpu/ib_ops_bench" "$O/ops.json" > "$O/ops.log" 2>&1
  echo "ops rc=$? $(el)"; grep -E "linears per layer" "$O/ops.log"
fi
R=$O/runs; mkdir -p "$R"
PRE512=(--batch-size 8 --input-len 512 --output-len 8 --num-prompts 32 --runs 1)
PRE128=(--batch-size 8 --input-len 128 --output-len 8 --num-prompts 64 --runs 1)
CONT=(--input-len 128 --output-len 128 --num-prompts 512 --load-mode open --num-warmups 16 --runs 1)
C64=(--input-len 128 --output-len 128 --num-prompts 512 --load-mode closed --max-concurrency 64
  --num-warmups 16 --runs 1)
SEED=(--batch-size 8 --input-len 32 --output-len 128 --num-prompts 200 --runs 1)
{
  for run in ${IB_RUNS_LIST:-awq_c64 int8_c64 awq_seed awq_cont int8_cont awq_pre128 awq_pre512 \
    nf4_pre128}; do
    for set in ${IB_SETS:-IB_QUANT_GEMM=0 IB_QUANT_GEMM=8192}; do
      tag=${set//IB_QUANT_GEMM=/gemm}
      case $run in
        awq_pre512) run_llama "${run}_$tag" "$set" --quantization awq "${PRE512[@]}" ;;
        awq_pre128) run_llama "${run}_$tag" "$set" --quantization awq "${PRE128[@]}" ;;
        awq_seed) run_llama "${run}_$tag" "$set" --quantization awq "${SEED[@]}" ;;
        awq_c64) run_llama "${run}_$tag" "$set" --quantization awq "${C64[@]}" ;;
        int8_c64) run_llama "${run}_$tag" "$set" --quantization int8 "${C64[@]}" ;;
        awq_cont) run_llama "${run}_$tag" "$set" --quantization awq "${CONT[@]}" ;;
        int8_cont) run_llama "${run}_$tag" "$set" --quantization int8 "${CONT[@]}" ;;
        nf4_pre128) run_llama "${run}_$tag" "$set" --quantization nf4 "${PRE128[@]}" ;;
        *) echo "unknown run $run" ;;
      esac
      grep -E "TTFT median" "$R/${run}_$tag.log" 2>/dev/null | tr -s ' '
    done
  done
} 2>&1 | tee "$O/runs.log"
pack_runs
echo "done $(el)"
