#!/usr/bin/env bash
# One visit to the GPU machine for the decode GEMV's cluster split (IB_GEMV_SPLIT_K, issues 12
# and 13): build and the gpu tests once (backend_cuda_test runs the GEMV ops at splits 1, 2 and 4
# against the CPU oracle; engine_cuda_test runs at the default and again at IB_GEMV_SPLIT_K=2),
# then Llama-3-8B (dummy weights) at batch 1 (3 runs) for bf16, fp8 and int8 at splits 1, 2 and 4,
# and the seed protocol at splits 1 and 2, each through bench/gpu/fp8.sh's protocols.
# Usage (from the repository root, ~9 minutes): OUT=dir bash bench/gpu/split_k.sh
# Environment: IB_SPLITS_B1 ("1 2 4"), IB_SPLITS_SEED ("1 2"), IB_QUANTS ("fp8 int8"; bf16 always),
# IB_DEADLINE_S (570 for the whole script). Writes summary.txt, tests.log and all.tgz (every
# call's output).
set -u; T0=$(date +%s)
cd "$(dirname "$0")/../.."; O=${OUT:-$PWD/gpu-out}; W=$O/work; mkdir -p "$W"
export IB_BUILD_DIR=${IB_BUILD_DIR:-/tmp/ib-split}
DEADLINE=${IB_DEADLINE_S:-570}
left() { echo $(( DEADLINE - ($(date +%s) - T0) )); }
call() {  # call NAME [VAR=VALUE ...]: bench/gpu/fp8.sh into $W/NAME with the remaining deadline
  local name=$1; shift
  (( $(left) < 40 )) && { echo "$name skipped (deadline)"; return; }
  env OUT="$W/$name" IB_DEADLINE_S="$(left)" "$@" bash bench/gpu/fp8.sh > "$W/$name.log" 2>&1
  echo "== $name (+$(( $(date +%s) - T0 )) s)"; grep -E "rc=|FAILED|skipped" "$W/$name.log"
}
call tests IB_TARGETS="inferbench backend_cuda_test engine_cuda_test" IB_RUNS=none IB_SKIP_OPS=1
cp "$W/tests/tests.log" "$O/tests.log" 2>/dev/null
grep -E "^\[  PASSED|^\[  FAILED" "$W/tests/tests.log"
IB_GEMV_SPLIT_K=2 timeout 120 "$IB_BUILD_DIR/src/engine/engine_cuda_test" > "$W/engine_split2.log" 2>&1
echo "engine_cuda_test at IB_GEMV_SPLIT_K=2 rc=$?"; grep -E "^\[  PASSED|^\[  FAILED" "$W/engine_split2.log"
for s in ${IB_SPLITS_B1:-1 2 4}; do
  call "b1_s$s" IB_GEMV_SPLIT_K="$s" IB_SKIP_TESTS=1 IB_SKIP_OPS=1 IB_RUNS=b1 \
    IB_QUANTS="${IB_QUANTS:-fp8 int8}"
done
for s in ${IB_SPLITS_SEED:-1 2}; do
  call "seed_s$s" IB_GEMV_SPLIT_K="$s" IB_SKIP_TESTS=1 IB_SKIP_OPS=1 IB_RUNS=seed \
    IB_QUANTS="${IB_QUANTS:-fp8 int8}"
done
{ echo "| run | IB_GEMV_SPLIT_K | output tok/s | TPOT median ms |"; echo "| --- | --- | --- | --- |"
  for f in "$W"/*_s*/runs.log; do
    s=$(basename "$(dirname "$f")"); s=${s##*_s}
    while read -r line; do
      name=${line%% *}; tps=$(echo "$line" | sed -E 's/.*Output token throughput \| ([^|]*)\|.*/\1/')
      tpot=$(echo "$line" | sed -E 's/.*TPOT median \| ([^|]*)\|.*/\1/')
      echo "| $name | $s | $tps | $tpot |"
    done < "$f"
  done; } > "$O/summary.txt"
cat "$O/summary.txt"
tar czf "$O/all.tgz" -C "$W" . && rm -rf "$W"
echo "done +$(( $(date +%s) - T0 )) s"
