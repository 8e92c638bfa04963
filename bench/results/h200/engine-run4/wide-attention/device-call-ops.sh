#!/usr/bin/env bash
# Session 2026-11-30, call 3: the attention op bench and CUPTI kernel profiles of the decode step.
set -u; O=$OUT; T0=$(date +%s); el() { echo "+$(( $(date +%s) - T0 )) s"; }
cp .gpu-stage/commit.txt GIT_COMMIT
B=/tmp/ib-prof; W=$O/prof; mkdir -p $W
(cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DINFERBENCH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a \
  -DINFERBENCH_WERROR=OFF -DINFERBENCH_TESTS=OFF && cmake --build $B -j16 --target inferbench ib_ops_bench ib_kernel_profile) > $W/build.log 2>&1 || { tail -30 $W/build.log; exit 1; }
echo "built $(el)"
IB_OPS_SECTIONS=attention timeout 120 $B/bench/gpu/ib_ops_bench $W/ops_attention.json > $W/ops_attention.log 2>&1
echo "ops bench rc=$? $(el)"; grep -E "decode|attention|split_kv|rel L2" $W/ops_attention.log | head -60
P=$(readlink -f $B/bench/gpu/libib_kernel_profile.so)
prof() { # NAME ENV... -- ARGS
  local name=$1; shift; local envs=(); while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  env "${envs[@]}" IB_KERNEL_PROFILE=$W/$name.prof.txt LD_PRELOAD=$P timeout 120 $B/bin/inferbench run --device cuda --dtype bf16 \
    --load-format dummy --disable-tqdm --model llama-3-8b --result-dir $W/$name --overwrite "$@" > $W/$name.log 2>&1
  echo "== $name rc=$? $(el)"; head -25 $W/$name.prof.txt
  grep -E "output tok/s|TPOT|decode step" $W/$name.log | head -4
}
prof b1_wide IB_WIDE_ATTENTION=1 -- --batch-size 1 --input-len 32 --output-len 128 --num-prompts 4 --runs 1
prof b1_perlane IB_WIDE_ATTENTION=0 -- --batch-size 1 --input-len 32 --output-len 128 --num-prompts 4 --runs 1
prof b8_wide IB_WIDE_ATTENTION=1 -- --batch-size 8 --input-len 32 --output-len 128 --num-prompts 16 --runs 1
prof cont_wide IB_WIDE_ATTENTION=1 -- --input-len 128 --output-len 128 --num-prompts 1024 --load-mode open --num-warmups 16 --runs 1
prof cont_perlane IB_WIDE_ATTENTION=0 -- --input-len 128 --output-len 128 --num-prompts 1024 --load-mode open --num-warmups 16 --runs 1
rm -f $W/*/requests.jsonl
tar czf $O/prof.tgz --exclude='*.jsonl' -C $O prof
ls -la $O
