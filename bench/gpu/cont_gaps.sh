#!/usr/bin/env bash
# Where the continuous run's GPU waits (issues 15 and 13): Llama-3-8B bf16, 1,024 prompts of
# 128 / 128 (targets.sh's cont protocol), on binaries already in $B (IB_PREBUILT=1 unpacks
# bench/gpu/prebuilt.sh's bundle; IB_SKIP_BUILD=1 takes a warm machine's):
#   tests     (IB_GAPS_TESTS=1) backend_cuda_test *GemmBuckets*, CudaOps' matmuls and the
#             rope_and_cache tests (IB_GAPS_BACKEND_TESTS), and engine_cuda_test's CudaEngineTest
#             and CudaEngineQuant against the CPU engine, with IB_GEMM_M_BUCKETS=4, IB_PDL=3 and
#             IB_ROPE_VEC=1 (x_shared.sh's pdl section times IB_PDL=3)
#   runs      the run at the defaults (d) and with CUDA_MODULE_LOADING=EAGER (e: every kernel
#             module loaded when the context starts, none at its first launch mid-run), and with
#             each setting named in IB_GAPS_VARIANTS ("name:VAR=value,VAR=value ..." and then
#             flags, e.g. "f8:IB_ROPE_VEC=1,--quantization,fp8"),
#             interleaved twice (IB_GAPS_PASSES; the EAGER run in the first IB_GAPS_EAGER_PASSES)
#   timeline  the run at the defaults under the CUPTI tracer with a timeline of every kernel
#             (timeline.csv.gz; bench/gpu/step_gaps.py reads where the device idled)
# Usage (carry .deps/icu.tar.xz and .deps/prebuilt.tar.xz; ~4 minutes): IB_PREBUILT=1 OUT=dir
# bash bench/gpu/cont_gaps.sh. IB_GAPS_SECTIONS picks "runs timeline" (the default).
# Writes runs.log, runs.json, runs.tgz, timeline.tgz.
set -u; T0=$(date +%s)
cd "$(dirname "$0")/../.." || exit 1; O=${OUT:-$PWD/gpu-out}; mkdir -p "$O"
source bench/gpu/build_inferbench.sh && head_setup
has() { [[ " ${IB_GAPS_SECTIONS:-runs timeline} " == *" $1 "* ]]; }
R=$O/runs; mkdir -p "$R"
CONT=(--input-len 128 --output-len 128 --num-prompts 1024 --load-mode open --num-warmups 16
  --runs 1)
{
  nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem --format=csv
  if [ "${IB_GAPS_TESTS:-0}" = 1 ]; then
    IB_GEMM_M_BUCKETS=4 IB_PDL=3 IB_ROPE_VEC=1 IB_TEST_TIMEOUT_S=200 gpu_tests \
      "${IB_GAPS_BACKEND_TESTS:-*GemmBuckets*:*CudaOps.Matmul*:*CudaAttention.RopeAndCache*}" \
      "${IB_GAPS_ENGINE_TESTS:-*CudaEngineTest.*:*CudaEngineQuant.*}"
  fi
  if has runs; then
    for pass in $(seq 1 "${IB_GAPS_PASSES:-2}"); do
      run_llama "cont_d_$pass" "${CONT[@]}"
      [ "$pass" -le "${IB_GAPS_EAGER_PASSES:-2}" ] &&
        run_llama "cont_e_$pass" CUDA_MODULE_LOADING=EAGER "${CONT[@]}"
      for v in ${IB_GAPS_VARIANTS:-}; do
        IFS=, read -r -a sw <<< "${v#*:}"
        run_llama "cont_${v%%:*}_$pass" "${sw[@]}" "${CONT[@]}"
      done
    done
  fi
  if has timeline; then
    lib=$(readlink -f "$B/bench/gpu/libib_kernel_profile.so")
    P=$O/timeline; mkdir -p "$P"
    run_llama timeline_d IB_KERNEL_PROFILE="$P/profile.txt" IB_KERNEL_TIMELINE="$P/timeline.csv" \
      IB_KERNEL_TIMELINE_COUNT=400000 LD_PRELOAD="$lib" "${CONT[@]}"
    head -30 "$P/profile.txt" | cut -c1-160
    gzip -f "$P/timeline.csv"
    tar czf "$O/timeline.tgz" -C "$O" timeline && rm -rf "$P"
  fi
} 2>&1 | tee -a "$O/runs.log"
pack_runs
echo "done +$(( $(date +%s) - T0 )) s"
