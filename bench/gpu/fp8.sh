#!/usr/bin/env bash
# One visit to the GPU machine for the 8-bit formats (issue 13): build, the gpu tests (all of
# backend_cuda_test and engine_cuda_test: FP8 and INT8 against the CPU oracle, and the dense ops
# unchanged),
# the op benchmark's FP8 and bf16 decode sections (Llama-3-8B shapes), then `inferbench run` on
# Llama-3-8B dummy weights: batch 1 (3 runs), the seed protocol (batch 8, 200 prompts) and 1,024
# prompts continuous, each in bf16 and with --quantization fp8 (fp8 KV cache not yet), and with
# IB_RUNS containing seed70b, Llama-3-70B in fp8 on the seed protocol (it does not fit in bf16).
# Usage (from the repository root, ~8 minutes): OUT=dir bash bench/gpu/fp8.sh
# Environment: IB_BUILD_DIR (/tmp/ib-fp8), IB_TARGETS (what to build), IB_TEST_FILTER (gtest),
# IB_SKIP_BF16=1 (quantized runs only), IB_SKIP_TESTS=1, IB_SKIP_OPS=1, IB_RUNS ("b1 seed cont"),
# IB_QUANTS (the --quantization values run, "fp8"; e.g. "fp8 int8 int8-w8a8"),
# IB_DEADLINE_S (560). Writes build.log, tests.log, ops.log, ops.json, runs.log, runs.json
# (the result.json keys that matter), runs.tgz.
set -u; T0=$(date +%s); el() { echo "+$(( $(date +%s) - T0 )) s"; }
cd "$(dirname "$0")/../.."; O=${OUT:-$PWD/gpu-out}; mkdir -p "$O"
B=${IB_BUILD_DIR:-/tmp/ib-fp8}; DEADLINE=${IB_DEADLINE_S:-560}
left() { echo $(( DEADLINE - ($(date +%s) - T0) - 20 )); }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$O/env.txt" 2>&1
if ! { cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release -DINFERBENCH_CUDA=ON \
         -DCMAKE_CUDA_ARCHITECTURES=90a -DINFERBENCH_WERROR=OFF &&
       cmake --build "$B" -j 16 --target ${IB_TARGETS:-inferbench backend_cuda_test engine_cuda_test ib_ops_bench}; \
     } > "$O/build.log" 2>&1; then
  tail -30 "$O/build.log"; echo "BUILD FAILED"; exit 1
fi
echo "built $(el)"
if [ "${IB_SKIP_TESTS:-0}" != 1 ]; then
  for t in src/backend/cuda/backend_cuda_test src/engine/engine_cuda_test; do
    [ -x "$B/$t" ] || continue
    timeout "$(left)" "$B/$t" --gtest_filter="${IB_TEST_FILTER:-*}" \
      --gtest_output="json:$O/$(basename $t).json" >> "$O/tests.log" 2>&1
    echo "$(basename $t) rc=$? $(el)"
  done
  grep -E "^\[  FAILED  \]|Failure|Expected|Which is|actual|PASSED|FAILED TEST" "$O/tests.log" | head -40
fi
if [ "${IB_SKIP_OPS:-0}" != 1 ]; then
  IB_OPS_SECTIONS=${IB_OPS_SECTIONS:-gemm_fp8,gemm_decode} timeout "$(left)" "$B/bench/gpu/ib_ops_bench" "$O/ops.json" \
    > "$O/ops.log" 2>&1
  echo "ops rc=$? $(el)"; grep -E "per layer|ceiling" "$O/ops.log"
fi
R=$O/runs; mkdir -p "$R"
run() { local name=$1; shift
  local model=llama-3-8b cap=120; [[ $name == *70b* ]] && { model=llama-3-70b; cap=300; }
  if (( $(left) < 60 )); then echo "$name skipped (deadline)"; return; fi
  (( cap > $(left) )) && cap=$(left)
  timeout -s INT "$cap" "$B/bin/inferbench" run --device cuda --dtype bf16 --load-format dummy \
    --disable-tqdm --model "$model" --result-dir "$R/$name" --overwrite "$@" > "$R/$name.log" 2>&1
  echo "$name rc=$? $(el) $(grep -E "Output token throughput|TPOT median" "$R/$name.log" | tr -s ' ' | tr '\n' ' ')" | tee -a "$O/runs.log"; }
B1=(--batch-size 1 --input-len 32 --output-len 128 --num-prompts 4 --runs 3)
SEED=(--batch-size 8 --input-len 32 --output-len 128 --num-prompts 200 --runs 1)
CONT=(--input-len 128 --output-len 128 --num-prompts 1024 --load-mode open --num-warmups 16 --runs 1)
for r in ${IB_RUNS:-b1 seed cont}; do
  for q in ${IB_QUANTS:-fp8}; do
    case $r in
      b1) run "b1_$q" --quantization "$q" "${B1[@]}" ;;
      seed) run "seed_$q" --quantization "$q" "${SEED[@]}" ;;
      cont) run "cont_$q" --quantization "$q" "${CONT[@]}" ;;
      seed70b) run "seed_70b_$q" --quantization "$q" "${SEED[@]}" ;;  # Llama-3-70B: bf16 does not fit
    esac
  done
  if [ "${IB_SKIP_BF16:-0}" != 1 ]; then
    case $r in
      b1) run b1_bf16 "${B1[@]}" ;;
      seed) run seed_bf16 "${SEED[@]}" ;;
      cont) run cont_bf16 "${CONT[@]}" ;;
    esac
  fi
done
python3 bench/gpu/runs_json.py "$R" > "$O/runs.json"
rm -f "$R"/*/requests.jsonl "$R"/*/allocations.csv "$R"/*/memory.csv
tar czf "$O/runs.tgz" -C "$O" runs && rm -rf "$R"
echo "done $(el)"
