#!/usr/bin/env bash
# Device call 4 (issue 6): CUDA KV-growth test and find-oom at 24 GiB; everything in one tarball.
O="$OUT"; set -u; T0=$(date +%s)
el() { echo "+$(( $(date +%s) - T0 )) s"; }
W=build/call4; rm -rf $W; mkdir -p $W
cp .gpu-stage/commit.txt GIT_COMMIT
(cmake --preset h200 -DINFERBENCH_WERROR=OFF && cmake --build build/h200 -j16 --target inferbench engine_cuda_growth_test) > "$W/build.log" 2>&1 || { tail -30 "$W/build.log"; exit 1; }
echo "built $(el)"
timeout 60 build/h200/src/engine/engine_cuda_growth_test > "$W/cuda_growth_test.log" 2>&1
echo "engine_cuda_growth_test rc=$? $(el)"; grep -E "FAILED|PASSED|Failure" -A3 "$W/cuda_growth_test.log" | head -20
build/h200/bin/inferbench env > "$W/env.txt" 2>&1
timeout -s INT 330 build/h200/bin/inferbench sweep --find-oom --model llama-3-8b --device cuda --memory-limit 24GiB \
  --input-lens 1024 --oom-steps 8 --oom-max-batch 128 --find-oom-batch 16 \
  --result-dir "$W/find-oom-24gib" > "$W/find-oom-24gib.log" 2>&1
echo "find-oom rc=$? $(el)"; cat "$W/find-oom-24gib.log" | tail -40
rm -f "$W/find-oom-24gib"/*.html
tar czf "$O/call4.tgz" -C build call4
