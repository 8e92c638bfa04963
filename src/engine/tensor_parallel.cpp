// A tensor-parallel group's weight shards and lock-step execution (detail/tensor_parallel.h).
#include "engine/detail/tensor_parallel.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <optional>
#include <span>
#include <vector>

#include "backend/backend_factory.h"
#include "core/ggml_blocks.h"

namespace ib::detail {
namespace {

// One rank's destination while shards are copied: its index, backend and weights.
struct RankOut {
  int rank;
  Backend* to;
  ModelWeights* out;
};

// Copies every rank's part of dense weights from one backend to the ranks' through the host,
// reading each tensor once: whole tensors, row ranges stacked in order, or a column range of
// every row. Each call returns one tensor a rank, in the order of `ranks`.
class ShardCopier {
 public:
  ShardCopier(Backend& from, std::span<const RankOut> ranks) : from_(from), ranks_(ranks) {}

  Result<std::vector<Tensor>> whole(const Tensor& src) {
    std::vector<Tensor> out(ranks_.size());
    if (src.empty()) return out;
    return rows(src, [&](int) { return std::vector<IndexRange>{{0, src.dim(0)}}; });
  }

  // src (N, ...) -> (sum of counts, ...): the ranges' rows, in order.
  Result<std::vector<Tensor>> rows(const Tensor& src,
                                   const std::function<std::vector<IndexRange>(int)>& ranges) {
    std::vector<Tensor> out(ranks_.size());
    if (src.empty()) return out;
    const std::vector<char> host = read(src);
    const size_t row_bytes = src.bytes() / static_cast<size_t>(src.dim(0));
    for (size_t i = 0; i < ranks_.size(); ++i) {
      std::vector<char> part;
      for (const IndexRange& r : ranges(ranks_[i].rank)) {
        const char* first = host.data() + static_cast<size_t>(r.begin) * row_bytes;
        part.insert(part.end(), first, first + static_cast<size_t>(r.count) * row_bytes);
      }
      const int64_t n = static_cast<int64_t>(part.size() / row_bytes);
      IB_ASSIGN_OR_RETURN(out[i], src.rank == 1 ? write(i, part, src.dtype, {n})
                                                : write(i, part, src.dtype, {n, src.dim(1)}));
    }
    return out;
  }

  // src (V, D) -> (count + 1, D): the range's rows and a row of zeros after them (the row a rank
  // looks up for the tokens outside its range).
  Result<std::vector<Tensor>> rows_and_zero_row(const Tensor& src,
                                                const std::function<IndexRange(int)>& range_of) {
    std::vector<Tensor> out(ranks_.size());
    const std::vector<char> host = read(src);
    const size_t row_bytes = src.bytes() / static_cast<size_t>(src.dim(0));
    for (size_t i = 0; i < ranks_.size(); ++i) {
      const IndexRange range = range_of(ranks_[i].rank);
      std::vector<char> part(static_cast<size_t>(range.count + 1) * row_bytes, 0);
      std::memcpy(part.data(), host.data() + static_cast<size_t>(range.begin) * row_bytes,
                  static_cast<size_t>(range.count) * row_bytes);
      IB_ASSIGN_OR_RETURN(out[i], write(i, part, src.dtype, {range.count + 1, src.dim(1)}));
    }
    return out;
  }

  // src (N, K) -> (N, count): columns [begin, begin + count) of every row.
  Result<std::vector<Tensor>> columns(const Tensor& src,
                                      const std::function<IndexRange(int)>& cols_of) {
    if (src.empty()) return std::vector<Tensor>(ranks_.size());
    return columns_of_host(read(src), src, cols_of);
  }

  // columns() of src from its host copy.
  Result<std::vector<Tensor>> columns_of_host(const std::vector<char>& host, const Tensor& src,
                                              const std::function<IndexRange(int)>& cols_of) {
    std::vector<Tensor> out(ranks_.size());
    const size_t e = dtype_size(src.dtype);
    const auto n = static_cast<size_t>(src.dim(0)), k = static_cast<size_t>(src.dim(1));
    for (size_t i = 0; i < ranks_.size(); ++i) {
      const IndexRange cols = cols_of(ranks_[i].rank);
      std::vector<char> part(n * static_cast<size_t>(cols.count) * e);
      for (size_t row = 0; row < n; ++row)
        std::memcpy(part.data() + row * static_cast<size_t>(cols.count) * e,
                    host.data() + (row * k + static_cast<size_t>(cols.begin)) * e,
                    static_cast<size_t>(cols.count) * e);
      IB_ASSIGN_OR_RETURN(out[i], write(i, part, src.dtype, {src.dim(0), cols.count}));
    }
    return out;
  }

  // A matmul weight's rows for every rank: its data and its per-row tensors (8-bit: the scales
  // and the asymmetric static row sums; 4-bit: the grouped scales and zero points); the static
  // activation scale and an act-order permutation (of the columns) as they are.
  Result<std::vector<WeightRef>> weight_rows(
      const WeightRef& src, const std::function<std::vector<IndexRange>(int)>& ranges) {
    IB_ASSIGN_OR_RETURN(const auto data, rows(src.data, ranges));
    IB_ASSIGN_OR_RETURN(const auto scales, rows(src.scales, ranges));
    IB_ASSIGN_OR_RETURN(const auto zeros, rows(src.zeros, ranges));
    IB_ASSIGN_OR_RETURN(const auto sums, rows(src.input_row_sums, ranges));
    IB_ASSIGN_OR_RETURN(const auto perm, whole(src.input_perm));
    std::vector<WeightRef> out(ranks_.size(), described_as(src));
    for (size_t i = 0; i < out.size(); ++i) {
      out[i].data = data[i];
      out[i].scales = scales[i];
      out[i].zeros = zeros[i];
      out[i].input_row_sums = sums[i];
      out[i].input_perm = perm[i];
      if (src.format != WeightFormat::kGguf) continue;
      // GGUF: each row keeps its block type; the rank's rows regrouped into segments (rows
      // keep the whole weight's stride: the longest row's bytes).
      GgufRows& g = out[i].gguf;
      g.cols = src.gguf.cols;
      int64_t row = 0;
      for (const IndexRange& r : ranges(ranks_[i].rank)) {
        for (int64_t n = r.begin; n < r.begin + r.count; ++n, ++row) {
          const bool room = g.append(row, src.gguf.type[src.gguf.segment_of(n)]);
          IB_ASSERT(room, "weight_rows: a GGUF weight's rows in more segments than it had");
        }
      }
    }
    return out;
  }

  // A matmul weight's columns for every rank: its data's (4-bit: the bytes of two columns each);
  // 8-bit, the per-row scales whole (a row's partial sums scale as its whole sum does) and the
  // asymmetric static row sums over the rank's columns (sum_k data[n][k], int8); 4-bit, the
  // columns of the groups the rank's columns make up. The caller checked that the columns split
  // at whole groups without an act-order permutation (check_columns_split).
  Result<std::vector<WeightRef>> weight_columns(const WeightRef& src,
                                                const std::function<IndexRange(int)>& cols_of) {
    if (src.format == WeightFormat::kGguf) return gguf_columns(src, cols_of);
    std::vector<WeightRef> out(ranks_.size(), described_as(src));
    if (is_4bit(src.format)) {
      IB_ASSERT(src.input_perm.empty() && src.group_size > 0,
                "weight_columns: a 4-bit weight split without act-order, in whole groups");
      const auto bytes_of = [&](int r) {
        const IndexRange c = cols_of(r);
        return IndexRange{c.begin / 2, c.count / 2};
      };
      const auto groups_of = [&](int r) {
        const IndexRange c = cols_of(r);
        return IndexRange{c.begin / src.group_size, c.count / src.group_size};
      };
      IB_ASSIGN_OR_RETURN(const auto data, columns(src.data, bytes_of));
      IB_ASSIGN_OR_RETURN(const auto scales, columns(src.scales, groups_of));
      IB_ASSIGN_OR_RETURN(const auto zeros, columns(src.zeros, groups_of));
      for (size_t i = 0; i < out.size(); ++i) {
        out[i].data = data[i];
        out[i].scales = scales[i];
        out[i].zeros = zeros[i];
      }
      return out;
    }
    if (src.empty()) return out;                    // (a mixture-of-experts layer's dense MLP)
    const std::vector<char> host = read(src.data);  // once, for the columns and the row sums
    IB_ASSIGN_OR_RETURN(const auto data, columns_of_host(host, src.data, cols_of));
    IB_ASSIGN_OR_RETURN(const auto scales, whole(src.scales));
    for (size_t i = 0; i < out.size(); ++i) {
      out[i].data = data[i];
      out[i].scales = scales[i];
      if (src.input_row_sums.empty()) continue;
      const IndexRange cols = cols_of(ranks_[i].rank);
      const int64_t n = src.data.dim(0), k = src.data.dim(1);
      std::vector<int32_t> sums(static_cast<size_t>(n), 0);
      for (int64_t row = 0; row < n; ++row)
        for (int64_t c = cols.begin; c < cols.begin + cols.count; ++c)
          sums[static_cast<size_t>(row)] +=
              static_cast<int8_t>(host[static_cast<size_t>(row * k + c)]);
      std::vector<char> bytes(sums.size() * sizeof(int32_t));
      std::memcpy(bytes.data(), sums.data(), bytes.size());
      IB_ASSIGN_OR_RETURN(out[i].input_row_sums, write(i, bytes, DType::kI32, {n}));
    }
    return out;
  }

 private:
  // A GGUF weight's columns for every rank: each row's whole blocks of the rank's columns (the
  // caller checked that they split at block boundaries), rows at the stride of the rank's
  // longest.
  Result<std::vector<WeightRef>> gguf_columns(const WeightRef& src,
                                              const std::function<IndexRange(int)>& cols_of) {
    std::vector<WeightRef> out(ranks_.size(), described_as(src));
    const std::vector<char> host = read(src.data);
    const int64_t n = src.data.dim(0), stride = src.data.dim(1);
    for (size_t i = 0; i < out.size(); ++i) {
      const IndexRange cols = cols_of(ranks_[i].rank);
      GgufRows g = src.gguf;
      g.cols = cols.count;
      const int64_t part_stride = gguf_row_stride(g);
      std::vector<char> part(static_cast<size_t>(n * part_stride), 0);
      for (int64_t row = 0; row < n; ++row) {
        const GgmlTypeInfo& t = ggml_type_info(src.gguf.type[src.gguf.segment_of(row)]);
        const int64_t first = cols.begin / t.block_elems * t.block_bytes;
        const int64_t bytes = cols.count / t.block_elems * t.block_bytes;
        std::memcpy(part.data() + row * part_stride, host.data() + row * stride + first,
                    static_cast<size_t>(bytes));
      }
      out[i].gguf = g;
      IB_ASSIGN_OR_RETURN(out[i].data, write(i, part, src.data.dtype, {n, part_stride}));
    }
    return out;
  }

  // src's format and static activation quantization, without its tensors.
  static WeightRef described_as(const WeightRef& src) {
    WeightRef w;
    w.format = src.format;
    w.group_size = src.group_size;
    w.input_scale = src.input_scale;
    w.input_zero_point = src.input_zero_point;
    w.input_asymmetric = src.input_asymmetric;
    w.asymmetric = src.asymmetric;
    return w;
  }

  std::vector<char> read(const Tensor& src) {
    std::vector<char> host(src.bytes());
    from_.copy_to_host(src, host.data());
    return host;
  }

  Result<Tensor> write(size_t i, const std::vector<char>& host, DType dtype,
                       std::initializer_list<int64_t> shape) {
    const RankOut& dst = ranks_[i];
    Tensor probe(nullptr, dtype, shape);
    IB_ASSIGN_OR_RETURN(Buffer buf, dst.to->alloc(probe.bytes(), MemoryTag::kWeights));
    Tensor t = buf.view(dtype, shape);
    dst.to->copy_from_host(t, host.data(), dtype);
    dst.out->bytes += static_cast<int64_t>(buf.bytes());
    dst.out->storage.push_back(std::move(buf));
    return t;
  }

  Backend& from_;
  std::span<const RankOut> ranks_;
};

// Whether w's columns split over size ranks: any dense or 8-bit weight; a 4-bit one in whole
// groups and without an act-order permutation; a GGUF one in whole blocks of each of its row
// types. what: its name in the error.
Status check_columns_split(const WeightRef& w, int size, const char* what) {
  if (w.empty() || (w.format != WeightFormat::kGguf && !is_4bit(w.format))) return Ok{};
  const int64_t per_rank = w.cols() / size;
  if (w.format == WeightFormat::kGguf) {
    for (int seg = 0; seg < w.gguf.count; ++seg) {
      const GgmlTypeInfo& t = ggml_type_info(w.gguf.type[seg]);
      if (per_rank % t.block_elems != 0)
        return user_error("--tensor-parallel-size " + std::to_string(size) + ": the GGUF " + what +
                          " weights do not split (each rank's " + std::to_string(per_rank) +
                          " input columns are not whole " + std::string(t.name) + " blocks of " +
                          std::to_string(t.block_elems) + "); use another --tensor-parallel-size");
    }
    return Ok{};
  }
  if (w.input_perm.empty() && w.group_size > 0 && per_rank % w.group_size == 0) return Ok{};
  const std::string why =
      !w.input_perm.empty()
          ? std::string("its act-order (desc_act) column permutation spans the whole input")
          : "each rank's " + std::to_string(per_rank) + " input columns are not whole groups of " +
                std::to_string(w.group_size);
  return user_error("--tensor-parallel-size " + std::to_string(size) + ": the 4-bit " + what +
                    " weights do not split (" + why +
                    "); use another --tensor-parallel-size, a checkpoint whose sizes split, or "
                    "--quantization fp8 or int8");
}

Status check_splittable(const ModelWeights& weights, int size) {
  const auto dense = [](const WeightRef& w) { return w.format == WeightFormat::kDense; };
  // The linears and the experts split in every format: 8-bit (one scale per output row), 4-bit
  // (scales grouped along K) and GGUF (blocks along K), the row-parallel ones in whole groups or
  // blocks; quantized latent-attention or shared-expert weights do not yet.
  for (const LayerWeights& l : weights.layers) {
    const bool ok = dense(l.router) && dense(l.q_a) && dense(l.kv_a) && dense(l.kv_b) &&
                    dense(l.shared_gate_up) && dense(l.shared_down);
    if (!ok)
      return user_error(
          "--tensor-parallel-size above 1 with quantized router, latent-attention or "
          "shared-expert weights is not supported yet; use dense weights for them");
    IB_TRY(check_columns_split(l.wo, size, "o_proj"));
    IB_TRY(check_columns_split(l.w_down, size, "down_proj"));
    for (const WeightRef& e : l.expert_down) IB_TRY(check_columns_split(e, size, "expert down"));
    IB_ASSERT(l.moe_gate_up.empty(),
              "shard_weights: weights before the architecture's prepare_weights");
  }
  if (weights.lm_head.format != WeightFormat::kDense)
    return user_error("--tensor-parallel-size above 1: the LM head must be dense");
  return Ok{};
}

// Appends each rank's part of `weights` (a model's layers, and with globals its embedding, final
// norm and LM head) to its weights, allocated on its backend; each tensor read once.
Status shard_into(const ModelConfig& config, const ModelWeights& weights, Backend& from,
                  const TensorParallelPlan& plan, std::span<const RankOut> ranks, bool globals) {
  IB_TRY(check_splittable(weights, plan.size));
  ShardCopier copy(from, ranks);
  // each(member, tensors): each rank's tensor into that rank's member.
  const auto each = [&](Tensor ModelWeights::*member, const std::vector<Tensor>& tensors) {
    for (size_t i = 0; i < ranks.size(); ++i) (*ranks[i].out).*member = tensors[i];
  };
  if (globals) {
    // The embedding's and the LM head's rows of the rank's vocabulary (tied: the same memory);
    // the embedding's zero row after them serves the other tokens (ModelRunner's lookup).
    const auto vocab = [&](int r) { return vocab_rows_of_rank(config, plan, r); };
    IB_ASSIGN_OR_RETURN(const auto embed, copy.rows_and_zero_row(weights.embed, vocab));
    each(&ModelWeights::embed, embed);
    IB_ASSIGN_OR_RETURN(const auto final_norm, copy.whole(weights.final_norm));
    each(&ModelWeights::final_norm, final_norm);
    if (config.tie_word_embeddings) {
      for (const RankOut& r : ranks)
        r.out->lm_head = WeightRef(r.out->embed.slice_rows(0, vocab(r.rank).count));
    } else {
      IB_ASSIGN_OR_RETURN(const auto lm_head, copy.rows(weights.lm_head.data, [&](int r) {
        return std::vector<IndexRange>{vocab(r)};
      }));
      for (size_t i = 0; i < ranks.size(); ++i) ranks[i].out->lm_head.data = lm_head[i];
    }
  }
  // Multi-head latent attention's query and o split by heads as the dense ones, kv_b too.
  const bool mla = config.mla.kv_lora_rank > 0;
  const auto qkv = [&](int r) {
    return mla ? std::vector<IndexRange>{mla_ranges_of_rank(config, plan, r).query}
               : qkv_rows_of_rank(config, plan, r);
  };
  const auto o = [&](int r) {
    return mla ? mla_ranges_of_rank(config, plan, r).o : o_columns_of_rank(config, plan, r);
  };
  const auto kv_b = [&](int r) {
    return std::vector<IndexRange>{mla_ranges_of_rank(config, plan, r).kv_b};
  };
  const auto gate_up = [&](int r) {
    return gate_up_rows_of_rank(plan.intermediate_per_rank, r, config.intermediate_size);
  };
  const auto down = [&](int r) { return down_columns_of_rank(plan.intermediate_per_rank, r); };
  for (const LayerWeights& l : weights.layers) {
    std::vector<LayerWeights> s(ranks.size());
    for (LayerWeights& x : s) {
      x.k_scale = l.k_scale;
      x.v_scale = l.v_scale;
    }
    // set(member, tensors): each rank's tensor into its new layer's member.
    const auto set = [&](Tensor LayerWeights::*member, const std::vector<Tensor>& tensors) {
      for (size_t i = 0; i < s.size(); ++i) s[i].*member = tensors[i];
    };
    const auto set_weight = [&](WeightRef LayerWeights::*member,
                                const std::vector<Tensor>& tensors) {
      for (size_t i = 0; i < s.size(); ++i) (s[i].*member).data = tensors[i];
    };
    IB_ASSIGN_OR_RETURN(auto t, copy.whole(l.attn_norm));
    set(&LayerWeights::attn_norm, t);
    IB_ASSIGN_OR_RETURN(t, copy.whole(l.ffn_norm));
    set(&LayerWeights::ffn_norm, t);
    IB_ASSIGN_OR_RETURN(t, copy.whole(l.post_attn_norm));
    set(&LayerWeights::post_attn_norm, t);
    IB_ASSIGN_OR_RETURN(t, copy.whole(l.post_ffn_norm));
    set(&LayerWeights::post_ffn_norm, t);
    // set_ref(member, refs): each rank's whole weight (data and quantization) into its layer.
    const auto set_ref = [&](WeightRef LayerWeights::*member, const std::vector<WeightRef>& refs) {
      for (size_t i = 0; i < s.size(); ++i) s[i].*member = refs[i];
    };
    IB_ASSIGN_OR_RETURN(auto refs, copy.weight_rows(l.wqkv, qkv));
    set_ref(&LayerWeights::wqkv, refs);
    IB_ASSIGN_OR_RETURN(t, copy.rows(l.bqkv, qkv));
    set(&LayerWeights::bqkv, t);
    IB_ASSIGN_OR_RETURN(refs, copy.weight_columns(l.wo, o));
    set_ref(&LayerWeights::wo, refs);
    IB_ASSIGN_OR_RETURN(refs, copy.weight_rows(l.w_gate_up, gate_up));
    set_ref(&LayerWeights::w_gate_up, refs);
    IB_ASSIGN_OR_RETURN(refs, copy.weight_columns(l.w_down, down));
    set_ref(&LayerWeights::w_down, refs);
    // Multi-head latent attention: the latent projections and their norms whole, kv_b by heads.
    IB_ASSIGN_OR_RETURN(t, copy.whole(l.q_a.data));
    set_weight(&LayerWeights::q_a, t);
    IB_ASSIGN_OR_RETURN(t, copy.whole(l.q_a_norm));
    set(&LayerWeights::q_a_norm, t);
    IB_ASSIGN_OR_RETURN(t, copy.whole(l.kv_a.data));
    set_weight(&LayerWeights::kv_a, t);
    IB_ASSIGN_OR_RETURN(t, copy.whole(l.kv_a_norm));
    set(&LayerWeights::kv_a_norm, t);
    IB_ASSIGN_OR_RETURN(t, copy.rows(l.kv_b.data, kv_b));
    set_weight(&LayerWeights::kv_b, t);
    // DeepSeek's shared experts: one MLP of their summed width, split as the dense one.
    const int64_t shared =
        int64_t{config.moe.expert_intermediate_size} * config.moe.num_shared_experts;
    IB_ASSIGN_OR_RETURN(t, copy.rows(l.shared_gate_up.data, [&](int r) {
      return gate_up_rows_of_rank(plan.shared_intermediate_per_rank, r, shared);
    }));
    set_weight(&LayerWeights::shared_gate_up, t);
    IB_ASSIGN_OR_RETURN(t, copy.columns(l.shared_down.data, [&](int r) {
      return down_columns_of_rank(plan.shared_intermediate_per_rank, r);
    }));
    set_weight(&LayerWeights::shared_down, t);
    // Mixture-of-experts layers: the router whole; each expert split as the dense MLP, by its
    // own intermediate size.
    IB_ASSIGN_OR_RETURN(t, copy.whole(l.router.data));
    set_weight(&LayerWeights::router, t);
    const auto expert_gate_up = [&](int r) {
      return gate_up_rows_of_rank(plan.expert_intermediate_per_rank, r,
                                  config.moe.expert_intermediate_size);
    };
    const auto expert_down = [&](int r) {
      return down_columns_of_rank(plan.expert_intermediate_per_rank, r);
    };
    for (size_t e = 0; e < l.expert_gate_up.size(); ++e) {
      IB_ASSIGN_OR_RETURN(refs, copy.weight_rows(l.expert_gate_up[e], expert_gate_up));
      for (size_t i = 0; i < s.size(); ++i) s[i].expert_gate_up.push_back(refs[i]);
      IB_ASSIGN_OR_RETURN(refs, copy.weight_columns(l.expert_down[e], expert_down));
      for (size_t i = 0; i < s.size(); ++i) s[i].expert_down.push_back(refs[i]);
    }
    // A quantized linear readies its backend (the CUDA backend's scratch for its format), as
    // load_weights does on the backend that loads: the ranks' backends have loaded nothing.
    for (size_t i = 0; i < s.size(); ++i) {
      for (const WeightRef* w : {&s[i].wqkv, &s[i].wo, &s[i].w_gate_up, &s[i].w_down})
        if (!w->empty() && is_quantized(w->format)) IB_TRY(ranks[i].to->prepare_weight(*w));
      ranks[i].out->layers.push_back(std::move(s[i]));
    }
  }
  return Ok{};
}

std::string rank_description(const std::string& whole, int rank, int size) {
  return whole + ", tensor-parallel rank " + std::to_string(rank) + " of " + std::to_string(size);
}

// Every rank's destination: rank 0's weights on `first` (the engine's backend), the others' on
// the group's backends.
std::vector<RankOut> rank_outs(RankShards& shards, Backend& first) {
  std::vector<RankOut> out;
  for (size_t r = 0; r < shards.weights.size(); ++r)
    out.push_back({static_cast<int>(r), r == 0 ? &first : shards.group.backends[r - 1].get(),
                   &shards.weights[r]});
  return out;
}

// The group of `size` ranks with rank 0 on backend, and no weights yet (plan: the split). The
// CLI's checks before loading, again for callers without them.
Result<RankShards> empty_shards(const ModelConfig& model, int size, Backend& backend,
                                TensorParallelPlan& plan) {
  IB_TRY(check_tensor_parallel(model, size));
  IB_ASSIGN_OR_RETURN(plan, plan_tensor_parallel(model, size));
  RankShards shards;
  shards.rank_config = rank_config(model, plan);
  IB_ASSIGN_OR_RETURN(shards.group, create_rank_group(backend, size));
  shards.weights.resize(static_cast<size_t>(size));
  return shards;
}

}  // namespace

Result<ModelWeights> shard_weights(const ModelConfig& config, const ModelWeights& weights,
                                   Backend& from, const TensorParallelPlan& plan, int rank,
                                   Backend& to) {
  ModelWeights out;
  out.description = rank_description(weights.description, rank, plan.size);
  const RankOut dst[] = {{rank, &to, &out}};
  IB_TRY(shard_into(config, weights, from, plan, dst, true));
  return out;
}

LoraAdapter shard_lora_adapter(const LoraAdapter& adapter, const ModelConfig& config,
                               const TensorParallelPlan& plan, int rank) {
  const auto b_rows = [](const LoraMatrices& m, int64_t r, IndexRange rows) {  // B (out, r)
    LoraMatrices out;
    out.a = m.a;
    out.b.assign(m.b.begin() + rows.begin * r, m.b.begin() + (rows.begin + rows.count) * r);
    return out;
  };
  const auto a_columns = [](const LoraMatrices& m, int64_t r, IndexRange cols) {  // A (r, in)
    LoraMatrices out;
    out.b = m.b;
    const auto in = static_cast<int64_t>(m.a.size()) / r;
    for (int64_t i = 0; i < r; ++i)
      out.a.insert(out.a.end(), m.a.begin() + i * in + cols.begin,
                   m.a.begin() + i * in + cols.begin + cols.count);
    return out;
  };
  const std::vector<IndexRange> qkv = qkv_rows_of_rank(config, plan, rank);
  const int64_t q = int64_t{config.num_heads} * config.head_dim;
  const int64_t kv = int64_t{config.num_kv_heads} * config.head_dim;
  const IndexRange mlp =
      gate_up_rows_of_rank(plan.intermediate_per_rank, rank, config.intermediate_size)[0];
  LoraAdapter out = adapter;
  for (auto& layer : out.layers) {
    for (size_t t = 0; t < kNumLoraTargets; ++t) {
      LoraMatrices& m = layer[t];
      if (m.empty()) continue;
      const int64_t r = adapter.rank;
      switch (static_cast<LoraTarget>(t)) {
        case LoraTarget::kQ:
          m = b_rows(m, r, qkv[0]);
          break;
        case LoraTarget::kK:
          m = b_rows(m, r, {qkv[1].begin - q, qkv[1].count});
          break;
        case LoraTarget::kV:
          m = b_rows(m, r, {qkv[2].begin - q - kv, qkv[2].count});
          break;
        case LoraTarget::kO:
          m = a_columns(m, r, o_columns_of_rank(config, plan, rank));
          break;
        case LoraTarget::kGate:
        case LoraTarget::kUp:
          m = b_rows(m, r, mlp);
          break;
        case LoraTarget::kDown:
          m = a_columns(m, r, down_columns_of_rank(plan.intermediate_per_rank, rank));
          break;
      }
    }
  }
  return out;
}

Result<RankShards> shard_over_ranks(const ModelConfig& model, int size, ModelWeights whole,
                                    Backend& backend) {
  TensorParallelPlan plan;
  IB_ASSIGN_OR_RETURN(RankShards shards, empty_shards(model, size, backend, plan));
  for (int r = 0; r < size; ++r)
    shards.weights[static_cast<size_t>(r)].description =
        rank_description(whole.description, r, size);
  IB_TRY(shard_into(model, whole, backend, plan, rank_outs(shards, backend), true));
  return shards;
}

Result<RankShards> load_over_ranks(const ModelConfig& model, int size, const WeightOptions& options,
                                   Backend& backend, int layers_per_part) {
  IB_ASSERT((options.format == LoadFormat::kDummy || options.format == LoadFormat::kSafetensors) &&
                layers_per_part > 0,
            "load_over_ranks: dummy or safetensors weights in parts of at least one layer");
  TensorParallelPlan plan;
  IB_ASSIGN_OR_RETURN(RankShards shards, empty_shards(model, size, backend, plan));
  for (int first = 0; first < model.num_layers; first += layers_per_part) {
    ModelConfig part_config = model;
    part_config.num_layers = std::min(layers_per_part, model.num_layers - first);
    // DeepSeek's dense first layers, counted from the part's first layer.
    part_config.moe.first_dense_layers = std::max(0, model.moe.first_dense_layers - first);
    WeightOptions part_options = options;
    part_options.first_layer = first;
    part_options.whole_num_layers = model.num_layers;
    // Each part carries the embedding and the LM head (load_weights makes whole models); the
    // first part's are kept.
    IB_ASSIGN_OR_RETURN(const ModelWeights part, load_weights(part_config, part_options, backend));
    for (int r = 0; r < size && first == 0; ++r)
      shards.weights[static_cast<size_t>(r)].description =
          rank_description(part.description + ", loaded " + std::to_string(layers_per_part) +
                               (layers_per_part == 1 ? " layer" : " layers") + " at a time",
                           r, size);
    IB_TRY(shard_into(part_config, part, backend, plan, rank_outs(shards, backend), first == 0));
  }  // each part freed before the next loads
  return shards;
}

Result<TensorParallelRanks> start_ranks(RankShards& shards, const RunnerLimits& limits) {
  const size_t size = shards.weights.size();
  IB_ASSERT(shards.group.comms.size() == size && shards.group.backends.size() + 1 == size,
            "start_ranks: a group of the shards' size");
  TensorParallelRanks ranks;
  ranks.rank_config = shards.rank_config;
  ranks.comms = std::move(shards.group.comms);
  for (size_t r = 1; r < size; ++r) {
    std::unique_ptr<Backend> backend = std::move(shards.group.backends[r - 1]);
    IB_ASSIGN_OR_RETURN(auto runner,
                        ModelRunner::create(ranks.rank_config, std::move(shards.weights[r]), limits,
                                            *backend, ranks.comms[r].get()));
    ranks.backends.push_back(std::move(backend));
    ranks.runners.push_back(std::move(runner));
  }
  std::vector<Communicator*> others;
  for (size_t r = 1; r < ranks.comms.size(); ++r) others.push_back(ranks.comms[r].get());
  ranks.threads = std::make_unique<RankThreads>(std::move(others));
  return ranks;
}

std::vector<ModelRunner*> all_runners(ModelRunner& rank0, const TensorParallelRanks& ranks) {
  std::vector<ModelRunner*> out{&rank0};
  for (const auto& r : ranks.runners) out.push_back(r.get());
  return out;
}

Status capture_on_ranks(RankThreads& threads, std::span<ModelRunner* const> ranks,
                        const GraphOptions& options, int max_model_len) {
  std::vector<Status> status(ranks.size(), Ok{});
  threads.run([&](int r) {
    status[static_cast<size_t>(r)] =
        ranks[static_cast<size_t>(r)]->capture_decode_graphs(options, max_model_len);
  });
  for (const Status& s : status) IB_TRY(s);
  return Ok{};
}

RankThreads::RankThreads(std::vector<Communicator*> comms) {
  for (size_t i = 0; i < comms.size(); ++i)
    threads_.emplace_back([this, i, comm = comms[i]] { work(static_cast<int>(i) + 1, comm); });
}

RankThreads::~RankThreads() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void RankThreads::work(int rank, Communicator* comm) {
  comm->attach_thread();
  uint64_t seen = 0;
  for (;;) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
    if (stop_) return;
    seen = generation_;
    const std::function<void(int)>* task = task_;
    lock.unlock();
    (*task)(rank);
    lock.lock();
    if (++finished_ == static_cast<int>(threads_.size())) cv_.notify_all();
  }
}

void RankThreads::run(const std::function<void(int)>& task) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    task_ = &task;
    finished_ = 0;
    ++generation_;
  }
  cv_.notify_all();
  task(0);
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return finished_ == static_cast<int>(threads_.size()); });
}

Result<RunnerOutput> execute_on_ranks(RankThreads& threads, std::span<ModelRunner* const> ranks,
                                      std::span<const RunnerSeq> batch, bool capture_logits) {
  IB_ASSERT(!ranks.empty(), "execute_on_ranks without ranks");
  std::vector<std::optional<Result<RunnerOutput>>> outs(ranks.size());
  threads.run([&](int r) {
    outs[static_cast<size_t>(r)] = ranks[static_cast<size_t>(r)]->execute(batch, capture_logits);
  });
  for (size_t r = 1; r < outs.size(); ++r)
    if (outs[0]->ok() && !outs[r]->ok()) return outs[r]->error();
  return std::move(*outs[0]);
}

}  // namespace ib::detail
