#!/usr/bin/env bash
# lean_variants.sh NAME PYEDIT: a copy of the checkout's src with the Python edit PYEDIT applied to
# split_kv_kernel.cuh (the file's text is `s`), then the SASS bytes of lean_one.cu's two kernels
# (bf16 head_dim 128, 8 warps, GC 4 then GC 1) through ../sass-size-attn-lora/one-kernel/size.sh.
# Example: bash lean_variants.sh nosparse "s=s.replace('p.sparse.enabled() ?', 'false ?')"
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$here/../../../..
t=$(mktemp -d); trap 'rm -rf "$t"' EXIT
cp -r "$root/src" "$t/src"
python3 - "$t/src/backend/cuda/detail/split_kv_kernel.cuh" "$2" <<'PY'
import sys
p = sys.argv[1]; s = open(p).read()
exec(sys.argv[2])
open(p, 'w').write(s)
PY
echo "$1: $(bash "$here/../sass-size-attn-lora/one-kernel/size.sh" "$here/lean_one.cu" "$t/src" |
  awk '{printf "%s ", $1}')"
