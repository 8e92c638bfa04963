#!/usr/bin/env bash
# One visit to the GPU machine: configure the h200 preset, build the CUDA backend's tests and op
# benchmark, run the gpu-labelled tests, time the ops, and print a short table last.
# Writes under $OUT (set by the device tool; ./gpu-out otherwise): env.txt, build.log, ctest.log,
# gpu_tests.json, ops_bench.log, ops_bench.json.
# Options (environment): IB_JOBS (default 16), IB_SKIP_TESTS=1, IB_SKIP_BENCH=1,
# IB_TEST_FILTER (gtest filter), IB_MEMCHECK=1 (run the filtered tests under compute-sanitizer).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:-$PWD/gpu-out}"
mkdir -p "$OUT"
JOBS="${IB_JOBS:-16}"
BUILD=build/h200
started=$(date +%s)

{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "git: $(cat GIT_COMMIT 2>/dev/null || git rev-parse HEAD 2>/dev/null || echo unknown)"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,clocks.mem,power.limit \
    --format=csv 2>&1
  nvcc --version | tail -2
  cmake --version | head -1
  g++ --version | head -1
  nproc
} >"$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

echo "== configure + build ($JOBS jobs)"
if ! { cmake --preset h200 -DINFERBENCH_WERROR=OFF &&
       cmake --build "$BUILD" -j "$JOBS" --target backend_cuda_test ib_ops_bench; } \
       >"$OUT/build.log" 2>&1; then
  tail -60 "$OUT/build.log"
  echo "BUILD FAILED"
  exit 1
fi
echo "build: $(( $(date +%s) - started )) s"

test_status="skipped"
if [ "${IB_SKIP_TESTS:-0}" != 1 ]; then
  echo "== gpu tests"
  t0=$(date +%s)
  export GTEST_OUTPUT="json:$OUT/gpu_tests.json"
  if [ -n "${IB_TEST_FILTER:-}" ]; then export GTEST_FILTER="$IB_TEST_FILTER"; fi
  if [ "${IB_MEMCHECK:-0}" = 1 ]; then
    compute-sanitizer --tool memcheck --error-exitcode 3 "$BUILD/src/backend/cuda/backend_cuda_test" \
      >"$OUT/ctest.log" 2>&1
    rc=$?
  else
    ctest --test-dir "$BUILD" -L gpu --output-on-failure >"$OUT/ctest.log" 2>&1
    rc=$?
  fi
  unset GTEST_OUTPUT GTEST_FILTER
  test_status=$([ $rc -eq 0 ] && echo passed || echo "FAILED (rc $rc)")
  grep -E "^\[  FAILED  \]|Failure|error|Expected|Which is|actual|rel|CUDA error" "$OUT/ctest.log" | head -80
  echo "tests: $(( $(date +%s) - t0 )) s, $test_status"
fi

if [ "${IB_SKIP_BENCH:-0}" != 1 ]; then
  echo "== op benchmark"
  t0=$(date +%s)
  "$BUILD/bench/gpu/ib_ops_bench" "$OUT/ops_bench.json" >"$OUT/ops_bench.log" 2>&1
  rc=$?
  echo "bench: $(( $(date +%s) - t0 )) s, rc $rc"
  cat "$OUT/ops_bench.log"
fi

echo "== summary (total $(( $(date +%s) - started )) s)"
python3 - "$OUT" "$test_status" <<'PY'
import json, os, sys
out, status = sys.argv[1], sys.argv[2]
try:
    t = json.load(open(os.path.join(out, "gpu_tests.json")))
    print(f"gpu tests: {t['tests']} run, {t['failures']} failed, {t.get('disabled', 0)} disabled -> {status}")
    for s in t["testsuites"]:
        for c in s["testsuite"]:
            err = c.get("max_rel_l2")
            print(f"  {'FAILED' if c.get('failures') else 'ok':6} {s['name'] + '.' + c['name']:<62}"
                  + (f" max rel L2 {float(err):.2e}" if err else ""))
except Exception as e:
    print("gpu tests:", status, f"({e.__class__.__name__})")
try:
    b = json.load(open(os.path.join(out, "ops_bench.json")))
except Exception:
    sys.exit(0)
print("op               shape                      path        us    GB/s  %copy  TFLOP/s")
for r in b["rows"]:
    keep = (r["group"] == "ceiling"
            or (r["group"] == "decode" and r["op"] in ("qkv", "o", "gate_up", "down", "lm_head")
                and r["shape"].split("x")[0] in ("1", "8", "16"))
            or r["op"] == "attention"
            or (r["group"] == "prefill" and r["shape"].startswith("4096")))
    if keep:
        print(f"{r['op']:<16} {r['shape']:<26} {r['path']:<9} {r['time_us']:8.1f} {r['achieved_gb_per_s']:7.0f}"
              f" {100*r['copy_ceiling_fraction']:5.1f}% {r['achieved_tflop_per_s']:7.1f}")
for k, v in b["summary"].items():
    print(f"{k}: {v:.4g}" if isinstance(v, float) else f"{k}: {v}")
PY
