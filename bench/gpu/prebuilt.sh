#!/usr/bin/env bash
# The GPU binaries built on this machine instead of on the GPU machine, whose build of them costs
# ~4-5 minutes of a 30-minute visit: builds inferbench, the two gpu test binaries,
# ib_ops_bench and the CUPTI kernel tracer (libib_kernel_profile.so) for sm_90a into build/sm90a (nvcc 13.0 here as there; ~40 minutes on 2 cores), then
# packs them with the shared libraries they need that the GPU machine's Ubuntu 24.04 may lack
# (yaml-cpp 0.7, libjpeg 62, fmt 9; ICU travels in .deps/icu.tar.xz) into
# .deps/prebuilt.tar.xz, stamped with `git describe --always --dirty` of the tree when packed (with
# IB_SKIP_BUILD=1 after an edit, a newer tree than the binaries').
# On the GPU machine head_setup (build_inferbench.sh) unpacks it into $B when IB_PREBUILT=1:
#   carry [".deps/icu.tar.xz", ".deps/prebuilt.tar.xz"], command IB_PREBUILT=1 OUT=$OUT bash
#   bench/gpu/quant_gemm.sh (or attn_mma.sh, moe_gemm.sh)
# The working tree travels too (64 MiB with the carried files): move bench/results aside for the
# call (it is ~53 MB; no script there reads it).
# Environment: IB_PREBUILT_DIR (build/sm90a), JOBS (2), IB_SKIP_BUILD=1 (pack what is built),
# IB_BASE_OPS_BENCH (an older build's ib_ops_bench, packed as bench/gpu/ib_ops_bench.base beside
# the new one: the baseline of an A/B of kernels without a switch, bench/gpu/ops_ab.sh; next to
# its twin in the archive it costs a few MB, where alone it would not fit a call's carry;
# IB_BASE_OPS_COMMIT names the tree it was built from, written beside it).
set -eu
cd "$(dirname "$0")/../.."
D=${IB_PREBUILT_DIR:-build/sm90a}
BINS=(bin/inferbench src/backend/cuda/backend_cuda_test src/engine/engine_cuda_test
  bench/gpu/ib_ops_bench bench/gpu/libib_kernel_profile.so)
if [ "${IB_SKIP_BUILD:-0}" != 1 ]; then
  cmake -S . -B "$D" -G Ninja -DCMAKE_BUILD_TYPE=Release -DINFERBENCH_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES=90a -DINFERBENCH_WERROR=OFF > /dev/null
  nice cmake --build "$D" -j "${JOBS:-2}" --target inferbench backend_cuda_test engine_cuda_test \
    ib_ops_bench ib_kernel_profile
fi
grep -qE '^CMAKE_CUDA_ARCHITECTURES:[A-Z]+=90a$' "$D/CMakeCache.txt" ||
  { echo "$D is not an sm_90a build: configure it with -DCMAKE_CUDA_ARCHITECTURES=90a" >&2
    exit 2; }
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
P=$T/prebuilt
mkdir -p "$P/lib"
for b in "${BINS[@]}"; do
  [ -x "$D/$b" ] || { echo "$D/$b is missing: build it (without IB_SKIP_BUILD=1)" >&2; exit 2; }
  mkdir -p "$P/$(dirname "$b")" && cp "$D/$b" "$P/$b"
done
# The libraries outside glibc, the compiler's runtime (the GPU machine's g++ 13 is newer), CUDA's,
# ICU's and those Ubuntu 24.04 has under the same soname (OpenSSL 3, zlib, libpng16: the system's
# copies stay first for its Python): copied under their sonames.
for b in "${BINS[@]}"; do ldd "$D/$b"; done | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' |
  sort -u |
  grep -vE '^(libc|libm|libpthread|libdl|librt|libgcc_s|libstdc\+\+|libicu)' |
  grep -vE '^(libssl|libcrypto|libz|libpng)' |
  grep -v '/cuda' | while read -r name path; do cp -L "$path" "$P/lib/$name"; done
git describe --always --dirty > "$P/COMMIT"
if [ -n "${IB_BASE_OPS_BENCH:-}" ]; then
  cp "$IB_BASE_OPS_BENCH" "$P/bench/gpu/ib_ops_bench.base"
  echo "${IB_BASE_OPS_COMMIT:-unknown}" > "$P/bench/gpu/ib_ops_bench.base.COMMIT"
fi
tar cf - --sort=name -C "$T" prebuilt | xz -T1 -9 > .deps/prebuilt.tar.xz.tmp
mv .deps/prebuilt.tar.xz.tmp .deps/prebuilt.tar.xz
echo "$(cat "$P/COMMIT"): $(ls "$P/lib" | tr '\n' ' ')"
ls -la .deps/prebuilt.tar.xz
