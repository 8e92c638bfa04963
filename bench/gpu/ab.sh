#!/usr/bin/env bash
# No-regression A/B on the GPU machine (issue 12): two exported trees, .ab/base (the baseline
# commit) and .ab/new, each built once, then Llama-3-8B bf16 on dummy weights at batch 1 (3 runs),
# on the seed's protocol (batch 8, 200 prompts) and on 1,024 prompts of continuous batching,
# alternating base and new so that drift hits both. IB_AB_NEW_ENV: the new tree's switches for the
# A/B (default IB_ATTN_PREFETCH=0, the baseline's kernels); afterwards the new tree runs batch 1
# and the seed protocol once more with its own defaults, and the seed protocol with the K/V
# prefetch up to 8 sequences.
# Prepare here: rm -rf .ab && mkdir -p .ab/base .ab/new && git archive BASE | tar x -C .ab/base &&
#   git archive HEAD | tar x -C .ab/new && rm -rf .ab/*/bench/results && git rev-parse BASE >
#   .ab/base/GIT_COMMIT && git rev-parse HEAD > .ab/new/GIT_COMMIT  (.ab is in .git/info/exclude)
# Usage (~7 minutes of the machine), carrying .ab: OUT=dir bash .ab/new/bench/gpu/ab.sh
# Writes build.log, ab.log, ab.json (every run's result.json keys that matter), runs.tgz.
set -u; T0=$(date +%s); el() { echo "+$(( $(date +%s) - T0 )) s"; }
cd "$(dirname "$0")/../../../.."; O=${OUT:-$PWD/gpu-out}; mkdir -p $O
source .ab/new/bench/gpu/build_inferbench.sh
DEADLINE=${IB_DEADLINE_S:-540}
for t in base new; do
  (cmake -S .ab/$t -B /tmp/ab-$t -G Ninja -DCMAKE_BUILD_TYPE=Release -DINFERBENCH_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES=90a -DINFERBENCH_WERROR=OFF -DINFERBENCH_TESTS=OFF &&
   cmake --build /tmp/ab-$t -j16 --target inferbench) >> $O/build.log 2>&1 || { tail -30 $O/build.log; exit 1; }
  echo "built $t $(el)"
done
R=$O/runs; mkdir -p $R
NEW_ENV=(${IB_AB_NEW_ENV:-IB_ATTN_PREFETCH=0})
# run TREE NAME [VAR=value ...] FLAGS...: one inferbench run of a tree (run_llama).
run() { BIN=/tmp/ab-$1/bin/inferbench run_llama "${@:2}"; }
B1=(--batch-size 1 --input-len 32 --output-len 128 --num-prompts 4 --runs 3)
SEED=(--batch-size 8 --input-len 32 --output-len 128 --num-prompts 200 --runs 1)
CONT=(--input-len 128 --output-len 128 --num-prompts 1024 --load-mode open --num-warmups 16 --runs 1)
for i in 1 2; do
  run base b1_base_$i "${B1[@]}"; run new b1_new_$i "${NEW_ENV[@]}" "${B1[@]}"
  run base seed_base_$i "${SEED[@]}"; run new seed_new_$i "${NEW_ENV[@]}" "${SEED[@]}"
done
run base cont_base "${CONT[@]}"; run new cont_new "${NEW_ENV[@]}" "${CONT[@]}"
run new b1_new_defaults "${B1[@]}"; run new seed_new_defaults "${SEED[@]}"
run new seed_new_prefetch8 IB_ATTN_PREFETCH=8 "${SEED[@]}"  # does the K/V prefetch gain at 8?
python3 - "$R" > $O/ab.json <<'PY'
import json, os, sys
out = {}
for name in sorted(os.listdir(sys.argv[1])):
    p = os.path.join(sys.argv[1], name, "result.json")
    if not os.path.exists(p):
        continue
    r = json.load(open(p))
    out[name] = {k: r.get(k) for k in ("output_throughput", "median_tpot_ms", "median_ttft_ms",
                                      "kernel_switches") if k in r}
    out[name]["inferbench"] = (r.get("env") or {}).get("inferbench")
print(json.dumps(out, indent=1))
PY
rm -f $R/*/requests.jsonl $R/*/allocations.csv $R/*/memory.csv
tar czf $O/runs.tgz -C $O runs && rm -rf $R
echo "done $(el)"
