#!/usr/bin/env bash
# Device call 3 (issue 6): CUDA KV-growth test, find-oom at 24 GiB (batch and context searches,
# both KV modes), the last seed-table entry (phi-3-medium-4k), then a PDL A/B if time is left.
O="$OUT"; set -u; T0=$(date +%s)
el() { echo "+$(( $(date +%s) - T0 )) s"; }
cp .gpu-stage/commit.txt GIT_COMMIT
(cmake --preset h200 -DINFERBENCH_WERROR=OFF && cmake --build build/h200 -j16 --target inferbench engine_cuda_growth_test) > "$O/build.log" 2>&1 || { tail -30 "$O/build.log"; exit 1; }
echo "built $(el)"
timeout 60 build/h200/src/engine/engine_cuda_growth_test > "$O/cuda_growth_test.log" 2>&1
echo "engine_cuda_growth_test rc=$? $(el)"; tail -3 "$O/cuda_growth_test.log"
IB=build/h200/bin/inferbench
mkdir -p "$O/sweep"
timeout 200 "$IB" sweep --find-oom --model llama-3-8b --device cuda --memory-limit 24GiB --input-lens 1024 \
  --oom-steps 8 --oom-max-batch 512 --find-oom-batch 16 --result-dir "$O/sweep/find-oom-24gib" > "$O/sweep/find-oom-24gib.log" 2>&1
echo "find-oom rc=$? $(el)"; tail -5 "$O/sweep/find-oom-24gib.log"
rm -f "$O/sweep/find-oom-24gib"/*.html
mkdir -p build/gpu-suite && rm -rf build/gpu-suite/seed-table && cp -r .gpu-stage/seed-table build/gpu-suite/
LEFT=$(( 480 - ($(date +%s) - T0) )); echo "suite budget $LEFT s"
IB_SKIP_BUILD=1 timeout "$LEFT" bash bench/gpu/suite.sh build/gpu-suite/seed-table > "$O/suite_stdout.log" 2>&1
echo "suite rc=$? $(el)"; grep -E "entry|phi" "$O/suite_stdout.log" | tail -4
tar czf "$O/suite.tgz" --exclude=requests.jsonl --exclude=allocations.csv --exclude=report.html -C build/gpu-suite .
for pdl in 1 0; do for b in 1 8; do
  [ $(( $(date +%s) - T0 )) -gt 540 ] && break
  IB_PDL=$pdl timeout 40 "$IB" run --device cuda --dtype bf16 --load-format dummy --disable-tqdm --model llama-3-8b \
    --batch-size $b --input-len 32 --output-len 128 --num-prompts $(( b * 2 )) --runs 1 --num-warmups $b \
    --result-dir "$O/pdl/pdl${pdl}_b$b" --overwrite > /dev/null 2>&1
  echo "pdl=$pdl b=$b TPOT $(python3 -c "import json,sys;print(json.load(open(sys.argv[1]))['median_tpot_ms'])" "$O/pdl/pdl${pdl}_b$b/result.json" 2>/dev/null) $(el)"
done; done
rm -f "$O"/pdl/*/requests.jsonl "$O"/pdl/*/report.html "$O"/pdl/*/allocations.csv
