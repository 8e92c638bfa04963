# Sourced by the bench/gpu scripts (from the repository root). build_inferbench LOG builds the
# inferbench binary with the h200 preset into $BUILD (build/h200) with $JOBS (16) jobs, its
# output in LOG; on failure it prints LOG's tail and "BUILD FAILED" and returns 1.
build_inferbench() {
  if ! { cmake --preset h200 -DINFERBENCH_WERROR=OFF -DINFERBENCH_TESTS=OFF &&
         cmake --build "${BUILD:-build/h200}" -j "${JOBS:-16}" --target inferbench; } >"$1" 2>&1; then
    tail -40 "$1"
    echo "BUILD FAILED"
    return 1
  fi
}

# build_gpu_tests DIR LOG TARGET...: a Release CUDA build for sm_90a with tests into DIR (the gpu
# test binaries and inferbench), its output in LOG; on failure as build_inferbench.
build_gpu_tests() {
  local dir=$1 log=$2
  shift 2
  if ! { cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DINFERBENCH_CUDA=ON \
           -DCMAKE_CUDA_ARCHITECTURES=90a -DINFERBENCH_WERROR=OFF &&
         cmake --build "$dir" -j "${JOBS:-16}" --target "$@"; } >"$log" 2>&1; then
    tail -30 "$log"
    echo "BUILD FAILED"
    return 1
  fi
}

# head_setup: the scripts of a new kernel's visit (moe_gemm.sh, attn_mma.sh, quant_gemm.sh) share
# one build of the tree's HEAD: ICU on the library path, B the build directory (IB_BUILD_DIR,
# /tmp/ib-head), DEADLINE (IB_DEADLINE_S, 560 s after $T0), then, unless IB_SKIP_BUILD=1, with
# IB_PREBUILT=1 the binaries bench/gpu/prebuilt.sh packed here (use_prebuilt), else
# build_gpu_tests into $B with inferbench, the two gpu test binaries and IB_EXTRA_TARGETS (e.g.
# ib_ops_bench), its log in $O/build.log; on failure the log becomes $O/tests.log and the script
# exits.
head_setup() {
  use_icu
  B=${IB_BUILD_DIR:-/tmp/ib-head}
  DEADLINE=${IB_DEADLINE_S:-560}
  if [ "${IB_PREBUILT:-0}" = 1 ] && [ "${IB_SKIP_BUILD:-0}" != 1 ]; then use_prebuilt; fi
  prebuilt_libs "$B"
  [ "${IB_SKIP_BUILD:-0}" = 1 ] || [ "${IB_PREBUILT:-0}" = 1 ] && return 0
  # shellcheck disable=SC2086 # the extra targets are words
  build_gpu_tests "$B" "$O/build.log" inferbench backend_cuda_test engine_cuda_test \
    ${IB_EXTRA_TARGETS:-} ||
    { cp "$O/build.log" "$O/tests.log"; exit 1; }
  echo "built +$(( $(date +%s) - T0 )) s"
}

# use_prebuilt: the binaries bench/gpu/prebuilt.sh built on the CPU machine (.deps/prebuilt.tar.xz,
# carried) unpacked into $B in the build's layout, the bundle kept in $B/prebuilt (head_setup puts
# its libraries on the library path); prints the tree they were built from. Exits if it is missing.
use_prebuilt() {
  [ -f .deps/prebuilt.tar.xz ] ||
    { echo "IB_PREBUILT=1 needs .deps/prebuilt.tar.xz: run bench/gpu/prebuilt.sh, carry it"; exit 2; }
  mkdir -p "$B" && tar xJf .deps/prebuilt.tar.xz -C "$B" || exit 1
  cp -r "$B"/prebuilt/{bin,src,bench} "$B"/ || exit 1
  echo "prebuilt $(cat "$B/prebuilt/COMMIT") +$(( $(date +%s) - T0 )) s"
}

# prebuilt_libs DIR: when DIR holds a prebuilt bundle (this call's or an earlier one's, with
# IB_SKIP_BUILD=1), its libraries on the library path.
prebuilt_libs() {
  if [ -f "$1/prebuilt/COMMIT" ]; then
    export LD_LIBRARY_PATH=$1/prebuilt/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  fi
}

# head_tests BACKEND_FILTER VAR=value ENGINE_FILTER: unless IB_SKIP_TESTS=1, gpu_tests with the
# backend filter, then engine_cuda_test under ENGINE_FILTER with the switch VAR set (the engine
# against the CPU engine through the new kernel), its JSON in $O; prints the rc and the failures.
head_tests() {
  [ "${IB_SKIP_TESTS:-0}" = 1 ] && return 0
  gpu_tests "$1"
  env "$2" timeout 200 "$B/src/engine/engine_cuda_test" --gtest_filter="$3" \
    --gtest_output="json:$O/engine_cuda_test.json" >> "$O/tests.log" 2>&1
  echo "engine_cuda_test ($2) rc=$? +$(( $(date +%s) - T0 )) s"
  grep -E "^\[  FAILED  \]|PASSED|FAILED TEST" "$O/tests.log" | tail -8
}

# pack_runs: the runs under $R summarised into $O/runs.json, then packed with the build log into
# $O/runs.tgz (at most 8 files come back from a call) without the bulky per-request files.
pack_runs() {
  python3 bench/gpu/runs_json.py "$R" > "$O/runs.json"
  if [ -f "$O/build.log" ]; then mv "$O/build.log" "$R/"; fi
  find "$R" \( -name requests.jsonl -o -name allocations.csv -o -name memory.csv \) -delete
  tar czf "$O/runs.tgz" -C "$O" runs && rm -rf "$R"
}

# gpu_tests BACKEND_FILTER [ENGINE_FILTER]: $B's backend_cuda_test and engine_cuda_test with those
# gtest filters (an empty one skips that binary), their JSON results and the log (tests.log) in
# $O; prints each rc with the seconds since $T0, then the failures and the PASSED lines. Each
# binary may run IB_TEST_TIMEOUT_S (150) seconds.
gpu_tests() {
  : > "$O/tests.log"
  if [ -n "$1" ]; then
    timeout "${IB_TEST_TIMEOUT_S:-150}" "$B/src/backend/cuda/backend_cuda_test" --gtest_filter="$1" \
      --gtest_output="json:$O/backend_cuda_test.json" >> "$O/tests.log" 2>&1
    echo "backend_cuda_test rc=$? +$(( $(date +%s) - T0 )) s"
  fi
  if [ -n "${2:-}" ]; then
    timeout "${IB_TEST_TIMEOUT_S:-150}" "$B/src/engine/engine_cuda_test" --gtest_filter="$2" \
      --gtest_output="json:$O/engine_cuda_test.json" >> "$O/tests.log" 2>&1
    echo "engine_cuda_test rc=$? +$(( $(date +%s) - T0 )) s"
  fi
  grep -E "^\[  FAILED  \]|Failure|Expected|Which is|PASSED|FAILED TEST" "$O/tests.log" | head -30
}

# hf_parity TIMEOUT_S JSON FAMILIES RUNS [ARGS...]: tools/hf_compare.py with $B's inferbench on
# those families and runs, its log in $O/parity.log (transformers' warnings dropped) and its JSON
# moved to $O/JSON; prints the rc with the seconds since $T0 and the log's tail.
hf_parity() {
  local limit=$1 json=$2 families=$3 runs=$4
  shift 4
  PYTHONUNBUFFERED=1 timeout "$limit" python3 tools/hf_compare.py --inferbench "$B/bin/inferbench" \
    --families "$families" --runs "$runs" --json-name "$json" --out "$O/parity" "$@" 2>&1 |
    grep -v Warning > "$O/parity.log"
  echo "hf_compare rc=${PIPESTATUS[0]} +$(( $(date +%s) - T0 )) s"; tail -25 "$O/parity.log"
  [ -f "$O/parity/$json" ] && mv "$O/parity/$json" "$O/"
}

# ncu_on NAME KERNEL_REGEX LAUNCH_SKIP COMMAND...: Nsight Compute on one launch of the kernels
# matching KERNEL_REGEX (demangled names; the one after LAUNCH_SKIP of them) in COMMAND: sections
# speed of light, memory, warp states, occupancy, launch, scheduler and the source counters. The
# command's output and the report's details page go to $O/ncu_NAME.txt (its key lines printed),
# the source page's per-instruction table (SASS, executed instructions, stalls) to
# $O/sass_NAME.csv.gz.
ncu_on() {
  local name=$1 regex=$2 skip=$3
  shift 3
  timeout 200 ncu --clock-control none --kernel-name-base demangled -k "regex:$regex" \
    --launch-skip "$skip" --launch-count 1 --section SpeedOfLight \
    --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy \
    --section LaunchStats --section SchedulerStats --section SourceCounters \
    --export "/tmp/ncu-$name" --force-overwrite "$@" > "$O/ncu_$name.txt" 2>&1
  echo "$name rc=$? +$(( $(date +%s) - T0 )) s"
  timeout 60 ncu -i "/tmp/ncu-$name.ncu-rep" --page details >> "$O/ncu_$name.txt" 2>&1
  grep -E "$regex|Duration|DRAM Throughput|Compute \(SM\) Throughput|Registers Per|Achieved Occupancy|Theoretical Occupancy|Block Limit|Dynamic Shared|Issued Warp|No Eligible|Warp Cycles Per Issued|Grid Size" \
    "$O/ncu_$name.txt" | cut -c1-150
  timeout 60 ncu -i "/tmp/ncu-$name.ncu-rep" --page source --csv --print-source sass 2> \
    "$O/sass_$name.err" | gzip > "$O/sass_$name.csv.gz"
  rm -f "$O/sass_$name.err"
  echo "source page $name: $(zcat "$O/sass_$name.csv.gz" | wc -l) lines +$(( $(date +%s) - T0 )) s"
}

# ncu_prof NAME KERNEL_REGEX LAUNCH_SKIP RUN_ARGS...: ncu_on an `inferbench run` of Llama-3-8B
# bf16 on dummy weights (static load, one run, no warm-up) with RUN_ARGS.
ncu_prof() {
  local name=$1 regex=$2 skip=$3
  shift 3
  ncu_on "$name" "$regex" "$skip" "$B/bin/inferbench" run --device cuda --dtype bf16 \
    --load-format dummy --disable-tqdm --model llama-3-8b --runs 1 --num-warmups 0 \
    --load-mode static --result-dir "/tmp/ncu-run-$name" --overwrite "$@"
}

# use_icu: the GPU machine has no libicu. Debian's packages (bench/gpu/icu-deps.sh, carried as
# .deps/icu.tar.xz) are unpacked once and put on LD_LIBRARY_PATH.
use_icu() {
  if [ -f .deps/icu.tar.xz ] && [ ! -d .deps/icu/usr/lib ]; then
    tar xJf .deps/icu.tar.xz -C .deps && mv .deps/icu/usr/lib/x86_64-linux-gnu/* .deps/icu/usr/lib/
  fi
  if [ -d .deps/icu/usr/lib ]; then
    export LD_LIBRARY_PATH=$PWD/.deps/icu/usr/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  fi
}

# run_model MODEL NAME [VAR=value ...] FLAGS...: one `inferbench run` of MODEL in bf16 on dummy
# weights with ${BIN:-$B/bin/inferbench}, its result directory and log under $R, the variables set
# for it alone; skipped when fewer than 45 s remain before $DEADLINE seconds after $T0. Prints the
# throughput and TPOT lines. run_llama NAME ...: the same for Llama-3-8B.
run_llama() { run_model llama-3-8b "$@"; }
run_model() {
  local model=$1 name=$2 envs=()
  shift 2
  while [[ $1 == *=* ]]; do envs+=("$1"); shift; done
  if (( $(date +%s) - T0 > DEADLINE - 45 )); then echo "$name skipped (deadline)"; return; fi
  env "${envs[@]}" timeout 100 "${BIN:-$B/bin/inferbench}" run --device cuda --dtype bf16 \
    --load-format dummy --disable-tqdm --model "$model" --result-dir "$R/$name" --overwrite \
    "$@" > "$R/$name.log" 2>&1
  echo "$name rc=$? +$(( $(date +%s) - T0 )) s $(grep -E "Output token throughput|TPOT median" \
    "$R/$name.log" | tr -s ' ' | tr '\n' ' ')"
}

# llama_timeline NAME DIR [VAR=value ...] FLAGS...: a CUPTI kernel timeline (bench/gpu/
# kernel_profile.cpp, $B's libib_kernel_profile.so) of `inferbench run` on Llama-3-8B bf16 dummy
# weights at batch 8, input 32, output 128, 8 prompts, with the variables and flags given. Writes
# DIR/profile_NAME.txt, DIR/timeline_NAME.csv, the result directory DIR/run_NAME and the log
# DIR/NAME.log; prints the rc and the per-step summary (bench/gpu/timeline_summary.py), both also
# appended to $O/runs.log.
llama_timeline() {
  local name=$1 dir=$2 envs=() lib
  shift 2
  while [ $# -gt 0 ] && [[ $1 == *=* ]]; do envs+=("$1"); shift; done
  lib=$(readlink -f "$B/bench/gpu/libib_kernel_profile.so")
  env ${envs[@]+"${envs[@]}"} IB_KERNEL_PROFILE="$dir/profile_$name.txt" \
    IB_KERNEL_TIMELINE="$dir/timeline_$name.csv" IB_KERNEL_TIMELINE_COUNT=6000 LD_PRELOAD="$lib" \
    timeout 90 "$B/bin/inferbench" run --device cuda --dtype bf16 --load-format dummy \
    --disable-tqdm --model llama-3-8b --batch-size 8 --input-len 32 --output-len 128 \
    --num-prompts 8 --runs 1 --result-dir "$dir/run_$name" --overwrite "$@" > "$dir/$name.log" 2>&1
  echo "$name timeline rc=$?" | tee -a "$O/runs.log"
  python3 bench/gpu/timeline_summary.py "$dir/timeline_$name.csv" | tee -a "$O/runs.log"
}

# use_img: the GPU machine lacks libpng / libjpeg: Debian's packages (bench/gpu/image-deps.sh,
# carried as .deps/img.tar.xz) are unpacked once and put on LD_LIBRARY_PATH.
use_img() {
  if [ -f .deps/img.tar.xz ] && [ ! -d .deps/img/usr/lib ]; then
    tar xJf .deps/img.tar.xz -C .deps
    [ -d .deps/img/usr/lib/x86_64-linux-gnu ] && mv .deps/img/usr/lib/x86_64-linux-gnu/* .deps/img/usr/lib/
  fi
  if [ -d .deps/img/usr/lib ]; then
    export LD_LIBRARY_PATH=$PWD/.deps/img/usr/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  fi
}
