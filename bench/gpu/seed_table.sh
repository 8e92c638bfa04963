#!/usr/bin/env bash
# The seed table (bench/seed-table.yaml, 16 entries at three runs) on one engine version over
# several device calls: the binary is built from an exported tree (IB_SRC: `git archive` of the
# commit being measured, with a GIT_COMMIT file naming it, so every result.json names that commit
# whatever the checkout's HEAD), and each call resumes the entries an earlier call finished.
# Prepare (here, not on the device; bench/st_src is untracked and not ignored, so it travels):
#   rm -rf bench/st_src && mkdir -p bench/st_src &&
#   git archive 2a7a4fb -- . ':(exclude)bench/results' | tar x -C bench/st_src &&
#   git rev-parse 2a7a4fb > bench/st_src/GIT_COMMIT &&
#   cp bench/results/h200/seed-table-v3/seed-table.tgz bench/st_src/resume.tgz
# Usage (carry .deps/icu.tar.xz and bench/st_src/GIT_COMMIT: the export's own .gitignore hides
# GIT_COMMIT from the device's copy): OUT=dir IB_TIMEOUT_S=300 bash bench/gpu/seed_table.sh; a
# second call on the still-warm machine with IB_RESUME=<the first call's seed-table.tgz, copied
# into bench/st_src> reuses the build (/tmp/ib-st) and goes on. The build takes ~270 s; the
# suite's limit is cut to what the call has left (seed_top5.sh: IB_CALL_LIMIT_S, 600).
# Environment: IB_SRC (bench/st_src), IB_RESUME ($IB_SRC/resume.tgz when present), IB_TIMEOUT_S
# (seed_top5.sh's: the suite's limit; SIGINT keeps every finished entry). Writes build.log and
# seed_top5.sh's leaderboard.md, leaderboard.csv, suite.log and seed-table.tgz.
set -u; T0=$(date +%s)
cd "$(dirname "$0")/../.."; O=${OUT:-$PWD/gpu-out}; mkdir -p "$O"
source bench/gpu/build_inferbench.sh && use_icu
SRC=${IB_SRC:-bench/st_src}; BIN=/tmp/ib-st/bin/inferbench
[ -f "$SRC/GIT_COMMIT" ] || { echo "$SRC/GIT_COMMIT missing: prepare the export first, and carry it (this script's header)"; exit 2; }
if [ ! -x "$BIN" ]; then
  # The export finds ICU where CMakeLists.txt looks: its own .deps.
  [ -e "$SRC/.deps" ] || ln -s "$PWD/.deps" "$SRC/.deps"
  (cd "$SRC" && cmake -S . -B /tmp/ib-st -G Ninja -DCMAKE_BUILD_TYPE=Release -DINFERBENCH_CUDA=ON \
      -DCMAKE_CUDA_ARCHITECTURES=90a -DINFERBENCH_WERROR=OFF -DINFERBENCH_TESTS=OFF &&
    cmake --build /tmp/ib-st -j "${JOBS:-16}" --target inferbench) > "$O/build.log" 2>&1 ||
    { tail -20 "$O/build.log"; echo "BUILD FAILED"; exit 1; }
  echo "built $(cat "$SRC/GIT_COMMIT") +$(( $(date +%s) - T0 )) s"
fi
R=${IB_RESUME:-}; [ -z "$R" ] && [ -f "$SRC/resume.tgz" ] && R=$SRC/resume.tgz
IB_T0=$T0 IB_BIN=$BIN IB_SUITE=bench/seed-table.yaml IB_RUNS=3 IB_RESUME=$R bash bench/gpu/seed_top5.sh
