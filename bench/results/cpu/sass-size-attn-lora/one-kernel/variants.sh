#!/usr/bin/env bash
# variants.sh: the one-kernel cubins of attn_one.cu, lean_one.cu and lookahead_one.cu at the
# tree's code and with one edit each to a copy of src (what each part of the code costs in SASS
# bytes). Prints "variant: bytes" lines; sizes.txt is its output at the sources named there.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
src=$here/../../../../../src
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
# variant NAME FILE.cu HEADER [OLD NEW]...: src copied, OLD replaced by NEW in HEADER (under
# backend/cuda/detail), FILE.cu's kernels' bytes printed (in size.sh's order).
variant() {
  local name=$1 file=$2 header=$3
  shift 3
  rm -rf "$tmp/src" && cp -r "$src" "$tmp/src"
  python3 - "$tmp/src/backend/cuda/detail/$header" "$@" <<'PY'
import sys
p = sys.argv[1]
s = open(p).read()
for old, new in zip(sys.argv[2::2], sys.argv[3::2]):
    assert old in s, old
    s = s.replace(old, new)
open(p, "w").write(s)
PY
  echo "$name: $(bash "$here/size.sh" "$here/$file" "$tmp/src" | cut -d' ' -f1 | tr '\n' ' ')"
}
A=attn_lora.cuh
L=lora_shrink.cuh
echo "attention, bf16 head_dim 128 GC 4 8 warps: kLora, then the base kernel"
variant "  as in the tree" attn_one.cu $A
variant "  attn_lora_finish's body removed" attn_one.cu $A \
  'int n, const float* a_s, float* r_s) {' 'int n, const float* a_s, float* r_s) { return;'
variant "  without the counter and the last block's sums" attn_one.cu $A \
  '  __shared__ bool last;' '  return; __shared__ bool last;'
variant "  kBatch 1" attn_one.cu $A 'constexpr int kBatch = 3;' 'constexpr int kBatch = 1;'
variant "  kBatch 2" attn_one.cu $A 'constexpr int kBatch = 3;' 'constexpr int kBatch = 2;'
S=split_kv_kernel.cuh
echo "attention without the shares, bf16 head_dim 128 8 warps: GC 1, then GC 4 (lean_one.cu)"
variant "  as in the tree" lean_one.cu $S
variant "  the block-sparse key lookup removed" lean_one.cu $S \
  'p.sparse.enabled() ? block_sparse_key(p.sparse, qv.pos, key) : key' 'key'
variant "  the L2 prefetch of the block's rows removed" lean_one.cu $S \
  '  prefetch_block_rows<T, HD, kThreads>(p, blk);' ''
variant "  the last block's merge of partitions removed" lean_one.cu $S \
  '    merge_split_partials<T, HD, kWarps, kLora>(p, t, head0, gc, active, o_s);' ''
echo "lookahead paths, bf16 V 8: the next op's rows, then the op's own rows"
variant "  as in the tree" lookahead_one.cu $L
variant "  main K loop rolled" lookahead_one.cu $L \
  '#pragma unroll(TT == 1 ? 4 : 1)' '#pragma unroll 1'
variant "  main K loop unrolled 2" lookahead_one.cu $L \
  '#pragma unroll(TT == 1 ? 4 : 1)' '#pragma unroll(TT == 1 ? 2 : 1)'
variant "  both K loops rolled" lookahead_one.cu $L \
  '#pragma unroll(TT == 1 ? 4 : 1)' '#pragma unroll 1' \
  '#pragma unroll 4
      for (int64_t c = int64_t{threadIdx.x} * V; c < k2;' '#pragma unroll 1
      for (int64_t c = int64_t{threadIdx.x} * V; c < k2;'
