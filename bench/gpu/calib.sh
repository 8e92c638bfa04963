#!/usr/bin/env bash
# Two visits to the GPU machine for calibrated static activation scales and the quantization
# matrix (issue 13). Part a (~7 minutes): build, the gpu tests of the quantized and fused ops and
# of the CUDA engine (CudaQuant, CudaFused, CudaEngine*, CudaEngineCalibration), then Llama-3-8B
# (dummy weights) at batch 1 and on the seed protocol in bf16, fp8, int8 and int8-w8a8 (through
# bench/gpu/fp8.sh) and int8-w8a8 calibrated (minmax, asymmetric) on
# bench/quant-matrix-prompts.jsonl, and fp8 / int8 at batch 1 with IB_PDL=1. Part b (~6 minutes; builds first if the machine is fresh):
# bench/quant-matrix.yaml with one run per row and its eval columns.
# Usage (from the repository root): OUT=dir IB_PART=a|b bash bench/gpu/calib.sh
# Part a's environment: IB_QUANTS (fp8.sh's, "fp8 int8 int8-w8a8"), IB_SKIP_BF16, IB_TEST_FILTER,
# IB_PDL_QUANTS ("fp8 int8"; empty: no PDL runs).
# Writes (a) tests.log, runs.log, runs.json, calib.log, all.tgz; (b) leaderboard.md,
# leaderboard.csv, suite.log, qm.tgz.
set -u; T0=$(date +%s)
cd "$(dirname "$0")/../.."; O=${OUT:-$PWD/gpu-out}; mkdir -p "$O"
export IB_BUILD_DIR=${IB_BUILD_DIR:-/tmp/ib-calib}; B=$IB_BUILD_DIR
el() { echo "+$(( $(date +%s) - T0 )) s"; }
if [ "${IB_PART:-a}" = a ]; then
  W=$O/work; mkdir -p "$W"
  OUT=$W IB_TARGETS="inferbench backend_cuda_test engine_cuda_test" IB_RUNS="b1 seed" \
    IB_QUANTS="${IB_QUANTS:-fp8 int8 int8-w8a8}" IB_SKIP_OPS=1 IB_DEADLINE_S=430 \
    IB_TEST_FILTER="${IB_TEST_FILTER:-*CudaQuant*:*CudaFused*:*CudaEngine*}" bash bench/gpu/fp8.sh \
    > "$W/fp8.log" 2>&1
  echo "fp8.sh rc=$? $(el)"; grep -E "rc=|FAILED|PASSED|Failure" "$W/fp8.log" | head -30
  cp "$W/tests.log" "$W/runs.log" "$W/runs.json" "$O/" 2>/dev/null
  calib() { local name=$1; shift
    timeout -s INT 120 "$B/bin/inferbench" run --device cuda --dtype bf16 --load-format dummy \
      --model llama-3-8b --quantization int8-w8a8 --calibration minmax --dataset-name jsonl \
      --dataset-path bench/quant-matrix-prompts.jsonl --disable-tqdm --output-len 128 \
      --result-dir "$W/$name" --overwrite "$@" > "$W/$name.log" 2>&1
    echo "$name rc=$? $(el) $(grep -E "calibrat|Output token throughput|TPOT median" "$W/$name.log" | tr -s ' ' | tr '\n' ' ')" | tee -a "$O/calib.log"; }
  calib b1_int8_w8a8_minmax --batch-size 1 --num-prompts 4 --runs 3
  calib seed_int8_w8a8_minmax --batch-size 8 --num-prompts 200 --runs 1
  # Programmatic dependent launch for the 8-bit formats' extra small kernels (quantize / norm):
  # batch 1 with IB_PDL=1, against fp8.sh's runs above.
  for q in ${IB_PDL_QUANTS-fp8 int8}; do
    IB_PDL=1 timeout -s INT 120 "$B/bin/inferbench" run --device cuda --dtype bf16 \
      --load-format dummy --model llama-3-8b --quantization $q --disable-tqdm --batch-size 1 \
      --input-len 32 --output-len 128 --num-prompts 4 --runs 3 --result-dir "$W/b1_${q}_pdl" \
      --overwrite > "$W/b1_${q}_pdl.log" 2>&1
    echo "b1_${q}_pdl rc=$? $(el) $(grep -E "Output token throughput|TPOT median" "$W/b1_${q}_pdl.log" | tr -s ' ' | tr '\n' ' ')" | tee -a "$O/calib.log"
  done
  rm -f "$W"/*/requests.jsonl "$W"/*/allocations.csv "$W"/*/memory.csv
  tar czf "$O/all.tgz" -C "$W" . && rm -rf "$W"
else
  if [ ! -x "$B/bin/inferbench" ] || [ ! -f "$B/bench/gpu/libib_kernel_profile.so" ]; then
    OUT=$O/build IB_TARGETS="inferbench ib_kernel_profile" IB_RUNS=none IB_SKIP_TESTS=1 \
      IB_SKIP_OPS=1 bash bench/gpu/fp8.sh > "$O/build.log" 2>&1 || { tail -20 "$O/build.log"; exit 1; }
    rm -rf "$O/build"; echo "built $(el)"
  fi
  # Where the calibrated run's extra time per decode step goes (part a: int8-w8a8 batch 1, 331
  # tok/s dynamic on random prompts, 270 calibrated on the jsonl prompts): per-kernel profiles of
  # batch 1, dynamic on the same jsonl prompts, calibrated asymmetric and symmetric.
  P=$(readlink -f "$B/bench/gpu/libib_kernel_profile.so")
  prof() { local name=$1; shift
    IB_KERNEL_PROFILE=$O/profile_$name.txt LD_PRELOAD=$P timeout -s INT 90 "$B/bin/inferbench" \
      run --device cuda --dtype bf16 --load-format dummy --model llama-3-8b \
      --quantization int8-w8a8 --dataset-name jsonl --dataset-path bench/quant-matrix-prompts.jsonl \
      --disable-tqdm --batch-size 1 --output-len 128 --num-prompts 2 --runs 1 \
      --result-dir "/tmp/prof-$name" --overwrite "$@" > "$O/prof_$name.log" 2>&1
    echo "$name rc=$? $(el) $(grep -E "Output token throughput|TPOT median" "$O/prof_$name.log" | tr -s ' ' | tr '\n' ' ')"
    sed -n 3,14p "$O/profile_$name.txt" | cut -c1-150; }
  if [ "${IB_PROFILE:-1}" = 1 ]; then
    prof dynamic
    prof minmax_asym --calibration minmax
    [ "${IB_PROFILE_SYM:-0}" = 1 ] && prof minmax_sym --calibration minmax --calibration-scheme symmetric
  fi
  timeout -s INT $(( ${IB_DEADLINE_S:-580} - ($(date +%s) - T0) )) "$B/bin/inferbench" suite bench/quant-matrix.yaml \
    --result-dir "$O/qm" --override runs=1 > "$O/suite.log" 2>&1
  echo "suite rc=$? $(el)"; tail -5 "$O/suite.log"
  cp "$O/qm/leaderboard.md" "$O/qm/leaderboard.csv" "$O/" 2>/dev/null; cat "$O/leaderboard.md"
  find "$O/qm" -name requests.jsonl -o -name allocations.csv -o -name memory.csv | xargs rm -f
  tar czf "$O/qm.tgz" -C "$O" qm && rm -rf "$O/qm"
fi
echo "done $(el)"
