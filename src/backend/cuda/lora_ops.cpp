// CudaBackend's LoraOps (backend/ops.h) and the fused decode ops' LoRA updates: shape checks,
// then lora.cu's launchers. The stacks' pointers travel as a kernel parameter and the shrunk rows
// live in the attention workspace (free between ops), so the ops neither allocate, synchronize
// nor read slot ids on the host: they run inside the decode CUDA graphs.
#include <algorithm>
#include <cstdint>

#include "backend/cuda/detail/cuda_backend_impl.h"
#include "backend/cuda/detail/lora_kernels.h"

namespace ib::cuda {
namespace {

// A group's pointers, its shapes checked: x (T, K) and out (T, out_cols) in act, the targets'
// stacks alike and their row ranges disjoint inside out.
struct CheckedGroup {
  LoraGroupPtrs ptrs;
  int64_t rank = 0, slots = 0;
};

CheckedGroup checked_group(DType act, const Tensor& x, const Tensor& slot_ids,
                           std::span<const LoraTargetStacks> targets, const Tensor& scales,
                           int64_t out_rows, int64_t out_cols) {
  IB_ASSERT(!targets.empty() && targets.size() <= LoraOps::kMaxLoraGroup,
            "lora_apply: 1 to 3 targets per group");
  IB_ASSERT(x.dtype == act && scales.dtype == DType::kF32 && slot_ids.dtype == DType::kI32,
            "lora_apply: x, out in act; scales f32; slot_ids int32");
  const int64_t t = x.rows(), k = x.row_size();
  IB_ASSERT(targets[0].a.rank == 3, "lora_apply: a (S, R, K)");
  const int64_t s = targets[0].a.dim(0), r = targets[0].a.dim(1);
  IB_ASSERT(s >= 1 && r >= 1 && scales.numel() == s && slot_ids.numel() == t && out_rows == t,
            "lora_apply: scales (S), slot_ids (T), out (T, ...)");
  CheckedGroup out{{}, r, s};
  LoraGroupPtrs& group = out.ptrs;
  for (size_t i = 0; i < targets.size(); ++i) {
    const LoraTargetStacks& g = targets[i];
    const int64_t n = g.b.rank == 3 ? g.b.dim(1) : 0;
    IB_ASSERT(g.a.rank == 3 && g.b.rank == 3 && g.a.dtype == act && g.b.dtype == act,
              "lora_apply: a (S, R, K), b (S, N, R) in act");
    IB_ASSERT(g.a.dim(0) == s && g.a.dim(1) == r && g.a.dim(2) == k && g.b.dim(0) == s &&
                  g.b.dim(2) == r && n >= 1 && g.row_offset >= 0 && g.row_offset + n <= out_cols,
              "lora_apply: shapes x (T, K), a (S, R, K), b (S, N, R) alike across the group, "
              "out (T, >= row_offset + N)");
    for (size_t j = 0; j < i; ++j) {  // disjoint row ranges: each element is added to once
      const LoraTargetStacks& h = targets[j];
      IB_ASSERT(g.row_offset + n <= h.row_offset || h.row_offset + h.b.dim(1) <= g.row_offset,
                "lora_apply: the group's row ranges overlap");
    }
    group.a[i] = g.a.data;
    group.b[i] = g.b.data;
    group.n[i] = n;
    group.row_offset[i] = g.row_offset;
  }
  group.count = static_cast<int>(targets.size());
  return out;
}

// The lookahead's operands of lora.next (IB_LORA_IN_GEMV=5): each next target's lookahead
// matrix (S, R, k_x) over the op's input into m and its A stack (S, R, k_out) over the op's output
// into a, for S slots of rank R in act; false where lora has none or a shape differs.
bool lookahead_stacks(DType act, const FusedLora& lora, int64_t slots, int64_t rank, int64_t k_x,
                      int64_t k_out, LoraGroupPtrs& m, LoraGroupPtrs& a) {
  const std::span<const LoraTargetStacks> next = lora.next;
  if (next.empty() || lora.next_m.size() != next.size()) return false;
  for (size_t t = 0; t < next.size(); ++t) {
    const Tensor& mt = lora.next_m[t];
    const Tensor& at = next[t].a;
    const bool fits = mt.rank == 3 && mt.dtype == act && mt.dim(0) == slots && mt.dim(1) == rank &&
                      mt.dim(2) == k_x && at.rank == 3 && at.dtype == act && at.dim(0) == slots &&
                      at.dim(1) == rank && at.dim(2) == k_out;
    if (!fits) return false;
    m.a[t] = mt.data;
    a.a[t] = at.data;
  }
  m.count = a.count = static_cast<int>(next.size());
  return true;
}

}  // namespace

void CudaBackend::lora_apply(const Tensor& x, const Tensor& slot_ids, const Tensor& a,
                             const Tensor& b, const Tensor& scales, int64_t row_offset,
                             Tensor out) {
  const LoraTargetStacks target{a, b, row_offset};
  lora_apply_group(x, slot_ids, std::span(&target, 1), scales, out);
}

void CudaBackend::lora_apply_group(const Tensor& x, const Tensor& slot_ids,
                                   std::span<const LoraTargetStacks> targets, const Tensor& scales,
                                   Tensor out) {
  IB_ASSERT(out.dtype == dtype_, "lora_apply: x, out in act; scales f32; slot_ids int32");
  const CheckedGroup g =
      checked_group(dtype_, x, slot_ids, targets, scales, out.rows(), out.row_size());
  IB_ASSERT(lora_chunk_tokens(g.ptrs.count * g.rank, attention_workspace_.bytes()) >= 1,
            "lora_apply: one token's shrunk rows (3 x rank fp32) exceed the workspace");
  run_op("lora_apply", [&] {
    unsigned* counters = lora_fused_ ? counter_at(0) : nullptr;
    launch_lora_apply(x, slot_ids, g.ptrs, g.rank, g.slots, scales, attention_workspace_.data(),
                      attention_workspace_.bytes(), counters, out, stream_, pdl_ && lora_pdl_);
  });
}

GemvLora CudaBackend::fused_lora_operands(const Tensor& x, const LoraShrinkNorm* norm,
                                          const FusedLora& lora, int64_t out_row_size, bool gemv,
                                          const WeightRef& w, const Tensor* out) {
  const CheckedGroup g =
      checked_group(dtype_, x, lora.slot_ids, lora.targets, lora.scales, x.rows(), out_row_size);
  IB_ASSERT(fused_lora(g.rank) && x.rows() <= 8,
            "fused LoRA: ranks a multiple of 8 up to kGemvLoraMaxRank, 8 tokens at most");
  IB_ASSERT(lora_chunk_tokens(g.ptrs.count * g.rank, attention_workspace_.bytes()) >= x.rows(),
            "fused LoRA: the step's shrunk rows exceed the workspace");
  const Tensor* gain = norm != nullptr ? norm->gain : nullptr;
  if (gain != nullptr) {
    IB_ASSERT(gain->dtype == dtype_ && gain->numel() == x.row_size(),
              "fused LoRA: gain (K) in act");
  }
  GemvLora l;
  l.group = g.ptrs;
  l.slot_ids = lora.slot_ids.as<int32_t>();
  l.scales = lora.scales.as<float>();
  l.u = static_cast<float*>(attention_workspace_.data());
  l.rank = static_cast<int>(g.rank);
  l.num_slots = static_cast<int>(g.slots);
  const int chained = take_lora_chain(x, lora, g.rank, norm, w, gemv);
  if (chained >= 0) {  // the op before this one accumulated the shrink: un-normalised
    l.u = lora_chain_u(chained);
    l.u_rms = norm != nullptr;
  } else if (gemv && lora_in_gemv_ == 5 && take_attention_lora(x, lora, out, l)) {
    // the attention before this op computed its shrink and the next op's (IB_LORA_ATTN)
  } else if (gemv && lora_in_gemv_ == 5 && lookahead_lora_shrink(x, lora, w, out, l)) {
    ++lora_shrink_launches_;
  } else {
    // With chained shrinks this launch also zeroes their accumulators: none is pending (spent
    // above), and every op that read one ran before it.
    const bool zero = lora_in_gemv_ == 3 && x.rows() > 0;  // (a launch of no rows does nothing)
    // IB_LORA_IN_GEMV=4: the dense GEMV, launched right after the shrink (no norm or quantize
    // kernel between them), meets it by flags.
    if (lora_in_gemv_ == 4 && gemv && w.format == WeightFormat::kDense && x.rows() > 0) {
      l.sync = flag_set(kLoraSyncOffset, kLoraSyncWords, lora_sync_pairs_++ % kLoraSyncSets);
      l.u_blocks = lora_shrink_blocks(x.rows(), g.ptrs.count, g.rank);
    }
    launch_lora_shrink(x, norm, lora.slot_ids, g.ptrs, g.rank, g.slots, l.u, stream_,
                       pdl_ && lora_pdl_, zero ? lora_chain_u(0) : nullptr,
                       zero ? kLoraChains * static_cast<int64_t>(kGemvLoraChainFloats) : 0, l.sync);
    ++lora_shrink_launches_;
    if (zero) {
      for (LoraChain& c : lora_chains_) c.zeroed = true;
    }
  }
  if (gemv && lora_in_gemv_ == 3 && out != nullptr && !lora.next.empty() &&
      w.format == WeightFormat::kDense) {
    chain_lora_shrink(l, lora, *out);
  }
  return l;
}

std::vector<unsigned> CudaBackend::lora_sync_words() {
  return counter_words(kLoraSyncOffset, size_t{kLoraSyncSets} * kLoraSyncWords);
}

std::vector<unsigned> CudaBackend::counter_words(size_t offset_bytes, size_t count) {
  std::vector<unsigned> words(count);
  run_op("counter_words", [&] {
    IB_CUDA_CHECK(cudaMemcpyAsync(words.data(), counter_at(offset_bytes), count * sizeof(unsigned),
                                  cudaMemcpyDeviceToHost, stream_),
                  "counter_words");
    IB_CUDA_CHECK(cudaStreamSynchronize(stream_), "counter_words");
  });
  return words;
}

float* CudaBackend::lora_chain_u(int i) const {
  return static_cast<float*>(lora_chain_.data()) + static_cast<size_t>(i) * kGemvLoraChainFloats;
}

int CudaBackend::take_lora_chain(const Tensor& x, const FusedLora& lora, int64_t rank,
                                 const LoraShrinkNorm* norm, const WeightRef& w, bool gemv) {
  // An rms op scales an un-normalised u by the 1 / rms its dense GEMV computes; the chain's A
  // has no gain but a folded one.
  const bool rms_ok =
      norm == nullptr || (norm->gain == nullptr && w.format == WeightFormat::kDense);
  int found = -1;
  for (size_t i = 0; i < lora_chains_.size(); ++i) {
    LoraChain& c = lora_chains_[i];
    if (!c.pending) continue;
    bool same = gemv && rms_ok && c.x == x.data && c.rows == x.rows() && c.rank == rank &&
                c.slot_ids == lora.slot_ids.data && c.count == lora.targets.size();
    for (size_t t = 0; same && t < c.count; ++t) same = c.a[t] == lora.targets[t].a.data;
    c.pending = false;  // taken, or dropped: its op's shrink is launched instead
    c.zeroed = false;
    if (same) found = static_cast<int>(i);
  }
  return found;
}

CudaBackend::LoraChain CudaBackend::pending_lora_chain(const Tensor& out, const FusedLora& lora,
                                                       int64_t rank) {
  LoraChain c;
  c.pending = true;
  c.x = out.data;
  c.slot_ids = lora.slot_ids.data;
  c.rows = out.rows();
  c.rank = rank;
  c.count = lora.next.size();
  for (size_t t = 0; t < lora.next.size(); ++t) c.a[t] = lora.next[t].a.data;
  return c;
}

void CudaBackend::chain_lora_shrink(GemvLora& l, const FusedLora& lora, const Tensor& out) {
  const std::span<const LoraTargetStacks> next = lora.next;
  const int64_t f = out.row_size();
  // The next op's A stacks over out's features, with this op's slots and rank; whole tiles of
  // 16 features and 16-byte rows (gemv_lora_chain's loads).
  bool ok = next.size() <= LoraOps::kMaxLoraGroup && f % 16 == 0 && out.rows() <= 8;
  for (const LoraTargetStacks& t : next) {
    ok = ok && t.a.rank == 3 && t.a.dtype == dtype_ && t.a.dim(0) == l.num_slots &&
         t.a.dim(1) == l.rank && t.a.dim(2) == f && reinterpret_cast<uintptr_t>(t.a.data) % 16 == 0;
  }
  if (!ok) return;
  for (size_t i = 0; i < lora_chains_.size(); ++i) {
    LoraChain& c = lora_chains_[i];
    if (c.pending || !c.zeroed) continue;
    c = pending_lora_chain(out, lora, l.rank);
    l.next = LoraGroupPtrs{};
    for (size_t t = 0; t < next.size(); ++t) l.next.a[t] = next[t].a.data;
    l.next.count = static_cast<int>(next.size());
    l.next_u = lora_chain_u(static_cast<int>(i));
    return;
  }
}

bool CudaBackend::lookahead_lora_shrink(const Tensor& x, const FusedLora& lora, const WeightRef& w,
                                        const Tensor* out, GemvLora& l) {
  LoraGroupPtrs m, a;
  if (out == nullptr || x.rows() == 0 || x.rows() > 8 || w.format != WeightFormat::kDense ||
      out->rows() != x.rows() ||
      !lookahead_stacks(dtype_, lora, l.num_slots, l.rank, x.row_size(), out->row_size(), m, a)) {
    return false;
  }
  const int i = free_lora_chain();
  if (i < 0) return false;
  lora_chains_[static_cast<size_t>(i)] = pending_lora_chain(*out, lora, l.rank);
  launch_lora_lookahead(x, lora.slot_ids, l.group, m, *out, a, l.rank, l.num_slots, l.u,
                        lora_chain_u(i), stream_, pdl_ && lora_pdl_);
  return true;
}

int CudaBackend::free_lora_chain() const {
  for (size_t i = 0; i < lora_chains_.size(); ++i) {
    if (!lora_chains_[i].pending) return static_cast<int>(i);
  }
  return -1;
}

Status CudaBackend::set_lora_attn(bool on) {
  if (on && attn_lora_buf_.data() == nullptr) {
    IB_ASSIGN_OR_RETURN(attn_lora_buf_,
                        alloc((kGemvLoraChainFloats + kAttnLoraPartialFloats) * sizeof(float),
                              MemoryTag::kWorkspace));
  }
  lora_attn_ = on;
  attn_lora_pending_ = {};
  return {};
}

void CudaBackend::lora_before_attention(const Tensor& a, const Tensor& residual,
                                        const FusedLora* lora) {
  attn_lora_pending_ = {};
  if (!lora_attn_ || lora_in_gemv_ != 5 || lora == nullptr || attn_lora_buf_.data() == nullptr) {
    return;
  }
  // As lookahead_lora_shrink takes them, with the residual's columns a's (the attention's blocks
  // read both over the same columns).
  if (a.rows() == 0 || a.rows() > 8 || residual.rows() != a.rows() ||
      residual.row_size() != a.row_size() || residual.dtype != dtype_ || a.dtype != dtype_) {
    return;
  }
  const CheckedGroup g = checked_group(dtype_, a, lora->slot_ids, lora->targets, lora->scales,
                                       a.rows(), residual.row_size());
  AttnLora p;
  // An accumulator no op has pending (none runs between here and o's op).
  const int chain = free_lora_chain();
  if (!fused_lora(g.rank) || chain < 0 ||
      static_cast<size_t>(g.ptrs.count) + lora->next.size() > LoraOps::kMaxLoraGroup ||
      !lookahead_stacks(dtype_, *lora, g.slots, g.rank, a.row_size(), residual.row_size(), p.next_m,
                        p.next_a)) {
    return;
  }
  p.cur = g.ptrs;
  p.slot_ids = lora->slot_ids.as<int32_t>();
  p.num_slots = static_cast<int>(g.slots);
  p.rank = static_cast<int>(g.rank);
  p.r = residual.data;
  p.u = static_cast<float*>(attn_lora_buf_.data());
  p.u_next = lora_chain_u(chain);
  p.partials = p.u + kGemvLoraChainFloats;
  p.partial_floats = kAttnLoraPartialFloats;
  p.counter = counter_at(kAttnLoraCounterOffset);
  attn_lora_pending_.params = p;
  attn_lora_pending_.armed = true;
  attn_lora_pending_.a = a.data;
  attn_lora_pending_.residual = residual.data;
  attn_lora_pending_.lora = lora;
  attn_lora_pending_.rows = a.rows();
  attn_lora_pending_.chain = chain;
}

bool CudaBackend::take_attention_lora(const Tensor& x, const FusedLora& lora, const Tensor* out,
                                      GemvLora& l) {
  const AttnLoraPending d = std::exchange(attn_lora_pending_, AttnLoraPending{});
  if (!d.done || d.a != x.data || d.rows != x.rows() || d.lora != &lora || out == nullptr ||
      out->data != d.residual || d.params.rank != l.rank) {
    return false;
  }
  lora_chains_[static_cast<size_t>(d.chain)] = pending_lora_chain(*out, lora, l.rank);
  l.u = d.params.u;
  return true;
}

void CudaBackend::lora_lookahead_matrix(const Tensor& a_next, const Tensor& w, const Tensor& a,
                                        const Tensor& b, float scale, Tensor m) {
  IB_ASSERT(a_next.dtype == dtype_ && w.dtype == dtype_ && a.dtype == dtype_ && b.dtype == dtype_ &&
                m.dtype == dtype_,
            "lora_lookahead_matrix: operands in act");
  run_op("lora_lookahead_matrix",
         [&] { launch_lora_lookahead_matrix(a_next, w, a, b, scale, m, stream_); });
}

void CudaBackend::fused_lora_expand(const GemvLora& l, const FusedLora& lora, Tensor out) {
  launch_lora_expand(l.u, lora.slot_ids, l.group, l.rank, l.num_slots, lora.scales, out, stream_,
                     pdl_ && lora_pdl_);
}

}  // namespace ib::cuda
