#!/usr/bin/env bash
# The seed-table suite on the H200 machine: builds inferbench (preset h200) unless
# IB_SKIP_BUILD=1, runs `inferbench suite` into the output directory, and leaves there the
# leaderboard (leaderboard.md/.csv/.html), the cross-model memory heatmap (heatmap.svg/.html),
# one result directory per entry, suite.log and env.txt. Rerunning into the same directory
# resumes the suite (finished entries are skipped).
#
# Usage: bench/gpu/suite.sh [OUT_DIR]          (default: $OUT, else ./gpu-out/suite)
# Environment:
#   IB_SUITE        suite file (bench/seed-table.yaml)
#   IB_MODEL_LIST   only these models: a,b
#   IB_OVERRIDES    space-separated KEY=VALUE run flags for every entry, a reduced protocol for
#                   dry runs, e.g. "num_prompts=16 runs=1"
#   IB_BUILD        build directory (build/h200); IB_JOBS (16); IB_SKIP_BUILD=1 reuses it
# CPU dry run: IB_SKIP_BUILD=1 IB_BUILD=build/release IB_SUITE=bench/seed-table-cpu.yaml \
#   IB_OVERRIDES="num_prompts=8 runs=2" bench/gpu/suite.sh /tmp/suite-dry
set -uo pipefail
cd "$(dirname "$0")/../.."
source bench/gpu/build_inferbench.sh
OUT_DIR="${1:-${OUT:-$PWD/gpu-out}/suite}"
SUITE="${IB_SUITE:-bench/seed-table.yaml}"
BUILD="${IB_BUILD:-build/h200}"
JOBS="${IB_JOBS:-16}"
IB="$BUILD/bin/inferbench"
mkdir -p "$OUT_DIR"
LOG="$(dirname "$OUT_DIR")/$(basename "$OUT_DIR").log"

if [ "${IB_SKIP_BUILD:-0}" != 1 ]; then
  echo "== build inferbench (h200 preset)"
  build_inferbench "$LOG.build" || exit 1
fi
"$IB" env >"$(dirname "$OUT_DIR")/env.txt" 2>&1 || true

args=(suite "$SUITE" --result-dir "$OUT_DIR")
[ -n "${IB_MODEL_LIST:-}" ] && args+=(--model-list "$IB_MODEL_LIST")
for o in ${IB_OVERRIDES:-}; do args+=(--override "$o"); done
echo "== $IB ${args[*]}"
"$IB" "${args[@]}" 2>&1 | tee "$LOG"
code=${PIPESTATUS[0]}
echo "== exit $code; leaderboard: $OUT_DIR/leaderboard.md"
exit "$code"
