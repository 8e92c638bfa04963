#!/usr/bin/env bash
# The quantized decode GEMVs of one token with x in each block's shared memory (issues 13 and 14):
# IB_GEMV_FUSE_QUANT (FP8 / INT8 W8A8: x quantized in the block, no quantize kernel),
# IB_GEMV_STAGE_X (W8A16, AWQ, NF4: x copied in) and IB_GEMV_STAGE_NORM (the staged x normalised
# in the block, no norm kernel), on binaries already in $B (IB_PREBUILT=1 unpacks
# bench/gpu/prebuilt.sh's bundle; IB_SKIP_BUILD=1 takes a warm machine's):
#   tests     backend_cuda_test CudaGemvXShared*, CudaQuant*, CudaQuant4*,
#             CudaGemvPersist*, the switch report; engine_cuda_test CudaEngineQuant* (every
#             format) and CudaEngineKvFp8* with IB_GEMV_STAGE_X=2, IB_GEMV_FUSE_QUANT=1,
#             IB_GEMV_STAGE_X=2 + IB_GEMV_STAGE_NORM=1 and IB_PDL=3 (the engine against the CPU
#             engine)
#   runs      Llama-3-8B dummy weights at batch 1 (32 / 128, 4 prompts, 3 runs), each format in
#             each form, interleaved, twice (int8-w8a8 and nf4 once): fp8 and int8-w8a8 with
#             x from global memory (0), staged (s: IB_GEMV_STAGE_X=1) and quantized in the block
#             (f: IB_GEMV_FUSE_QUANT=1), int8 (W8A16), awq and nf4 at 0 and s; with IB_X_SEED=1
#             the seed protocol (batch 8) of fp8 at s and 0 (it must not move)
#   trigger   (not in the default sections) fp8 and int8-w8a8 batch 1 and fp8 on the seed
#             protocol at IB_QUANT_TRIGGER 0, 1 and 2 (where the quantize kernel lets the next
#             GEMV launch), interleaved twice
#   persist   (not in the default sections) fp8 batch 1 with the persistent grid
#             (IB_GEMV_PERSIST=3), alone (p0), with x quantized in each block (pf: the block's
#             prologue paid once an SM's block instead of once a tile) and with
#             IB_QUANT_TRIGGER=1 (p1), against neither (0), interleaved twice
#   pdl       (not in the default sections) IB_PDL 2 against 3 (the attention lets the
#             activation quantize kernel after it launch as it starts): fp8 and int8-w8a8 batch 1
#             and fp8 on the seed protocol, interleaved twice
#   norm      (not in the default sections) IB_GEMV_STAGE_NORM (x normalised in the block that
#             stages it, no norm kernel) at batch 1: int8 (W8A16) staged (s, the default) and
#             staged + normalised (sn); awq and nf4 unstaged (0) and with IB_GEMV_STAGE_X=2 +
#             normalised (2n); interleaved twice
#   prof.tgz  batch 1 of IB_X_PROF (fp8 awq) with IB_GEMV_STAGE_X=1 under the CUPTI tracer
# Usage (carry .deps/icu.tar.xz and .deps/prebuilt.tar.xz; ~8 minutes): IB_PREBUILT=1 OUT=dir
# bash bench/gpu/x_shared.sh. IB_X_SECTIONS picks "tests runs trigger pdl norm persist prof"
# (default "tests runs prof").
# Writes tests.log, backend_cuda_test.json, engine_cuda_test_*.json (one a switch setting),
# runs.log, runs.json, runs.tgz, prof.tgz.
set -u; T0=$(date +%s)
cd "$(dirname "$0")/../.." || exit 1; O=${OUT:-$PWD/gpu-out}; mkdir -p "$O"
source bench/gpu/build_inferbench.sh && head_setup
has() { [[ " ${IB_X_SECTIONS:-tests runs prof} " == *" $1 "* ]]; }
R=$O/runs; mkdir -p "$R"
B1=(--batch-size 1 --input-len 32 --output-len 128 --num-prompts 4 --runs 3)
SEED=(--batch-size 8 --input-len 32 --output-len 128 --num-prompts 200 --runs 1 --load-mode static
  --max-model-len 4096 --seed 0)
{
  if has tests; then
    IB_TEST_TIMEOUT_S=300 gpu_tests \
      '*CudaGemvXShared*:*CudaQuant.*:*CudaQuant4*:*CudaGemvPersist*:*ReportsTheKernelSwitches*'
    for sw in IB_GEMV_STAGE_X=2 IB_GEMV_FUSE_QUANT=1 "IB_GEMV_STAGE_X=2 IB_GEMV_STAGE_NORM=1" \
      IB_PDL=3; do
      env $sw timeout 300 "$B/src/engine/engine_cuda_test" \
        --gtest_filter='*CudaEngineQuant*:*CudaEngineKvFp8*' \
        --gtest_output="json:$O/engine_cuda_test_${sw//[ =]/_}.json" >> "$O/tests.log" 2>&1
      echo "engine_cuda_test ($sw) rc=$? +$(( $(date +%s) - T0 )) s"
    done
    grep -E "^\[  FAILED  \]|PASSED|FAILED TEST" "$O/tests.log" | tail -8
  fi
  if has runs; then
    # W8A8: 0 (the quantize kernel, x from global memory), s (IB_GEMV_STAGE_X: its codes copied
    # into each block), f (IB_GEMV_FUSE_QUANT: quantized in each block); the others 0 and s.
    for pass in 1 2; do
      for q in fp8 int8-w8a8 int8 awq nf4; do
        forms="0 s"
        case $q in fp8 | int8-w8a8) forms="0 s f" ;; esac
        [ $pass = 2 ] && [[ $q == int8-w8a8 || $q == nf4 ]] && continue
        for v in $forms; do
          case $v in
            0) sw=(IB_GEMV_STAGE_X=0 IB_GEMV_FUSE_QUANT=0) ;;
            s) sw=(IB_GEMV_STAGE_X=1 IB_GEMV_FUSE_QUANT=0) ;;
            f) sw=(IB_GEMV_STAGE_X=0 IB_GEMV_FUSE_QUANT=1) ;;
          esac
          run_llama "b1_${q}_${v}_$pass" "${sw[@]}" --quantization $q "${B1[@]}"
        done
      done
    done
    if [ "${IB_X_SEED:-0}" = 1 ]; then
      run_llama seed_fp8_s IB_GEMV_STAGE_X=1 --quantization fp8 "${SEED[@]}"
      run_llama seed_fp8_0 IB_GEMV_STAGE_X=0 --quantization fp8 "${SEED[@]}"
    fi
  fi
  if has trigger; then
    # IB_QUANT_TRIGGER: where the W8A8 quantize kernel lets the next GEMV launch, 0 / 1 / 2.
    for pass in 1 2; do
      for q in fp8 int8-w8a8; do
        for v in 0 1 2; do
          run_llama "b1_${q}_t${v}_$pass" IB_QUANT_TRIGGER=$v --quantization $q "${B1[@]}"
        done
      done
      for v in 0 1 2; do
        run_llama "seed_fp8_t${v}_$pass" IB_QUANT_TRIGGER=$v --quantization fp8 "${SEED[@]}"
      done
    done
  fi
  if has pdl; then
    for pass in 1 2; do
      for q in fp8 int8-w8a8; do
        for v in 2 3; do
          run_llama "b1_${q}_pdl${v}_$pass" IB_PDL=$v --quantization $q "${B1[@]}"
        done
      done
      for v in 2 3; do
        run_llama "seed_fp8_pdl${v}_$pass" IB_PDL=$v --quantization fp8 "${SEED[@]}"
      done
    done
  fi
  if has norm; then
    for pass in 1 2; do
      for v in int8:s int8:sn awq:0 awq:2n nf4:0 nf4:2n; do
        q=${v%%:*}
        case ${v#*:} in
          0) sw=(IB_GEMV_STAGE_X=0 IB_GEMV_STAGE_NORM=0) ;;
          s) sw=(IB_GEMV_STAGE_X=1 IB_GEMV_STAGE_NORM=0) ;;
          sn) sw=(IB_GEMV_STAGE_X=1 IB_GEMV_STAGE_NORM=1) ;;
          2n) sw=(IB_GEMV_STAGE_X=2 IB_GEMV_STAGE_NORM=1) ;;
        esac
        run_llama "b1_${q}_${v#*:}_$pass" "${sw[@]}" --quantization $q "${B1[@]}"
      done
    done
  fi
  if has persist; then
    for pass in 1 2; do
      for v in 0 p0 pf p1; do
        case $v in
          0) sw=(IB_GEMV_PERSIST=0) ;;
          p0) sw=(IB_GEMV_PERSIST=3) ;;
          pf) sw=(IB_GEMV_PERSIST=3 IB_GEMV_FUSE_QUANT=1) ;;
          p1) sw=(IB_GEMV_PERSIST=3 IB_QUANT_TRIGGER=1) ;;
        esac
        run_llama "b1_fp8_${v}_$pass" "${sw[@]}" --quantization fp8 "${B1[@]}"
      done
    done
  fi
  if has prof; then
    lib=$(readlink -f "$B/bench/gpu/libib_kernel_profile.so")
    P=$O/prof; mkdir -p "$P"
    for q in ${IB_X_PROF:-fp8 awq}; do
      (( $(date +%s) - T0 > DEADLINE - 40 )) && { echo "prof $q skipped (deadline)"; continue; }
      IB_GEMV_STAGE_X=1 IB_KERNEL_PROFILE="$P/profile_$q.txt" \
        IB_KERNEL_TIMELINE="$P/timeline_$q.csv" IB_KERNEL_TIMELINE_COUNT=3000 LD_PRELOAD="$lib" \
        timeout 100 "$B/bin/inferbench" run --device cuda --dtype bf16 --load-format dummy \
        --disable-tqdm --model llama-3-8b --batch-size 1 --input-len 32 --output-len 128 \
        --num-prompts 4 --runs 1 --quantization $q --result-dir "$P/run_$q" --overwrite \
        > "$P/b1_$q.log" 2>&1
      echo "prof $q rc=$? +$(( $(date +%s) - T0 )) s"
      head -14 "$P/profile_$q.txt" | cut -c1-170
    done
    find "$P" \( -name requests.jsonl -o -name allocations.csv -o -name memory.csv \) -delete
    tar czf "$O/prof.tgz" -C "$O" prof && rm -rf "$P"
  fi
} 2>&1 | tee -a "$O/runs.log"
pack_runs
echo "done +$(( $(date +%s) - T0 )) s"
