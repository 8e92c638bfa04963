#!/usr/bin/env bash
# What choosing among cuBLASLt's algorithms would gain at a continuous run's GEMM shapes (issues 15
# and 13): ib_ops_bench's gemm_algos section (ops_bench_gemm_algos.cpp: Llama-3-8B's linears and
# lm_head at 256, 512, 1,000, 1,024 and 4,096 rows, the matmul as the engine runs it and each of
# the heuristic's first 8 candidates at the exact row count), twice.
# Usage (carry .deps/icu.tar.xz and .deps/prebuilt.tar.xz; ~1-2 minutes): IB_PREBUILT=1 OUT=dir
# bash bench/gpu/gemm_algos.sh. Writes algos_N.json and algos_N.log.
set -u; T0=$(date +%s)
cd "$(dirname "$0")/../.."; O=${OUT:-$PWD/gpu-out}; mkdir -p "$O"
source bench/gpu/build_inferbench.sh && head_setup
for i in $(seq 1 "${IB_PASSES:-2}"); do
  IB_OPS_SECTIONS=gemm_algos timeout 250 "$B/bench/gpu/ib_ops_bench" "$O/algos_$i.json" \
    > "$O/algos_$i.log" 2>&1
  echo "pass $i rc=$? +$(( $(date +%s) - T0 )) s"
  grep "^gemm_algos .* M=" "$O/algos_$i.log"
done
echo "done +$(( $(date +%s) - T0 )) s"
