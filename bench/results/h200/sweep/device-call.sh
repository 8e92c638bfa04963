#!/usr/bin/env bash
# Final device call: build, sweep grid, find-oom at 24 GiB, resume the seed-table suite.
O="$1"
set -u
T0=$(date +%s)
(cmake --preset h200 -DINFERBENCH_WERROR=OFF -DINFERBENCH_TESTS=OFF && cmake --build build/h200 -j16 --target inferbench) > "$O/build.log" 2>&1 || { tail -30 "$O/build.log"; exit 1; }
echo "built at +$(( $(date +%s) - T0 )) s"
IB=build/h200/bin/inferbench
mkdir -p "$O/sweep"
timeout 110 "$IB" sweep --model llama-3-8b --device cuda --batch-sizes 16,32,64,128 --input-lens 64,256,512,1024 \
  --output-len 16 --runs 1 --max-duration 10m --result-dir "$O/sweep/grid" > "$O/sweep/grid.log" 2>&1
echo "grid rc=$? at +$(( $(date +%s) - T0 )) s"; tail -12 "$O/sweep/grid.log"
timeout 170 "$IB" sweep --find-oom --model llama-3-8b --device cuda --memory-limit 24GiB --input-lens 1024 \
  --oom-steps 8 --oom-max-batch 512 --find-oom-batch 16 --result-dir "$O/sweep/oom-24gib" > "$O/sweep/oom.log" 2>&1
echo "oom rc=$? at +$(( $(date +%s) - T0 )) s"; tail -8 "$O/sweep/oom.log"
(cd "$O" && tar czf sweep.tgz --exclude=requests.jsonl --exclude=report.html --exclude=allocations.csv sweep/grid/cells && find sweep -path sweep/grid/cells -prune -o -type f -print | tar czf sweep-top.tgz -T - && rm -rf sweep)
mkdir -p build/gpu-suite && rm -rf build/gpu-suite/seed-table && cp -r .gpu-stage/seed-table build/gpu-suite/
LEFT=$(( 540 - ($(date +%s) - T0) ))
echo "suite budget $LEFT s"
IB_SKIP_BUILD=1 timeout "$LEFT" bash bench/gpu/suite.sh build/gpu-suite/seed-table > "$O/suite_stdout.log" 2>&1
echo "suite rc=$? at +$(( $(date +%s) - T0 )) s"; grep -E "entry .*: (done|running)" "$O/suite_stdout.log" | tail -6
tar czf "$O/suite2.tgz" --exclude=requests.jsonl --exclude=allocations.csv --exclude=report.html -C build/gpu-suite .
ls -la "$O"
