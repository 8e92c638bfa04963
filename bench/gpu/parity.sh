#!/usr/bin/env bash
# Engine parity on the GPU machine (issue 12): builds inferbench with CUDA, runs the gpu tests,
# writes the CPU regression test's golden files (tools/make_golden.py -> golden.tgz, unpack into
# src/engine/testdata/golden), then tools/hf_compare.py: every family at 24-4,096 (Mistral 5,000)
# tokens on CUDA in fp32 and bf16, then the CPU backend in fp32 while time remains.
# Usage (~9 minutes of the machine; carry .deps/icu.tar.xz): OUT=dir bash bench/gpu/parity.sh.
# IB_DEADLINE_S (540): the CPU rows stop being started after it. IB_PARITY_FAMILIES (all): a comma-separated subset;
# IB_PARITY_GOLDEN=0 skips the golden files; IB_PARITY_CPU_MAX_LEN (4096): the longest CPU prompt.
# Writes build.log, ctest.log, golden.tgz, hf_compare.json, hf_compare_cpu.json, parity.log.
set -u; T0=$(date +%s); el() { echo "+$(( $(date +%s) - T0 )) s"; }
cd "$(dirname "$0")/../.."; O=${OUT:-$PWD/gpu-out}; mkdir -p $O
source bench/gpu/build_inferbench.sh && use_icu  # carry .deps/icu.tar.xz
B=/tmp/ib-parity; DEADLINE=${IB_DEADLINE_S:-540}
(cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DINFERBENCH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a \
  -DINFERBENCH_WERROR=OFF && cmake --build $B -j16 --target inferbench backend_cuda_test backend_cuda_fault_test \
  engine_cuda_test engine_cuda_growth_test) > $O/build.log 2>&1 || { tail -30 $O/build.log; exit 1; }
echo "built $(el)"
timeout 150 ctest --test-dir $B -L gpu --output-on-failure > $O/ctest.log 2>&1; echo "ctest rc=$? $(el)"
grep -E "Test +#|tests passed|Failure|FAILED" $O/ctest.log | head -20
export PYTHONUNBUFFERED=1
if [ "${IB_PARITY_GOLDEN:-1}" = 1 ]; then
  G=/tmp/golden; rm -rf $G
  timeout 120 python3 tools/make_golden.py --out $G 2>&1 | tail -5; echo "golden $(el)"
  tar czf $O/golden.tgz -C $G .
fi
FAM=(); [ -n "${IB_PARITY_FAMILIES:-}" ] && FAM=(--families "$IB_PARITY_FAMILIES")
M=/tmp/hf-models; mkdir -p $M
timeout $(( DEADLINE - ($(date +%s) - T0) - 20 )) python3 tools/hf_compare.py --inferbench $B/bin/inferbench \
  --out $O --models-dir $M --runs cuda:fp32,cuda:bf16 --json-name hf_compare.json "${FAM[@]}" 2>&1 | grep -v Warning
echo "cuda rows $(el)"
LEFT=$(( DEADLINE - ($(date +%s) - T0) ))
if (( LEFT > 40 )); then
  timeout $LEFT python3 tools/hf_compare.py --inferbench $B/bin/inferbench --out $O --models-dir $M \
    --runs cpu:fp32 --json-name hf_compare_cpu.json --deadline-s $(( LEFT - 30 )) "${FAM[@]}" \
    --cpu-max-len ${IB_PARITY_CPU_MAX_LEN:-4096} 2>&1 | grep -v Warning
fi
echo "done $(el)"
