#!/usr/bin/env bash
# Device call for issue 6 (fast find-oom probes): build, the CUDA KV-growth tests, and the
# find-oom search at 24 GiB that took 238 s for its batch-64 probe before the change.
# Usage: bash bench/results/h200/oom-growth/device-call.sh OUT_DIR
O="$1"
set -u
T0=$(date +%s)
(cmake --preset h200 -DINFERBENCH_WERROR=ON &&
  cmake --build build/h200 -j16 --target inferbench engine_cuda_growth_test backend_cuda_test) \
  > "$O/build.log" 2>&1 || { tail -30 "$O/build.log"; exit 1; }
echo "built at +$(( $(date +%s) - T0 )) s"
timeout 120 build/h200/src/engine/engine_cuda_growth_test > "$O/cuda_growth_test.log" 2>&1
echo "engine_cuda_growth_test rc=$? at +$(( $(date +%s) - T0 )) s"; tail -4 "$O/cuda_growth_test.log"
timeout 300 build/h200/bin/inferbench sweep --find-oom --model llama-3-8b --device cuda \
  --memory-limit 24GiB --input-lens 1024 --oom-steps 8 --oom-max-batch 128 \
  --result-dir build/oom-24gib > "$O/find_oom.log" 2>&1
echo "find-oom rc=$? at +$(( $(date +%s) - T0 )) s"; tail -4 "$O/find_oom.log"
for f in oom.json oom.md oom_probes.jsonl; do cp build/oom-24gib/$f "$O/" 2>/dev/null; done
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$O/gpu.txt"
ls -la "$O"
