// DeepSeek-V2 layers' weights (multi-head latent attention, dense first layers, shared experts):
// allocation, dummy values and their bytes.
#include <cmath>

#include "engine/detail/weight_storage.h"

namespace ib {

uint64_t dummy_mla_stream(int layer, DummyMlaPart part) {
  return 2'000'000 + 16 * static_cast<uint64_t>(layer) + static_cast<uint64_t>(part);
}

namespace detail {
namespace {

float matrix_scale(int64_t fan_in) {
  return static_cast<float>(std::sqrt(3.0 / static_cast<double>(fan_in)));
}

// The (N, K) shapes of an MLA layer's attention matrices, in LayerWeights order: wqkv (the query
// projection), q_a (none without q_lora_rank), kv_a, kv_b, wo.
struct MlaMatrices {
  int64_t q_rows = 0, q_cols = 0, q_a_rows = 0, kv_a_rows = 0, kv_b_rows = 0, kv_b_cols = 0;
  int64_t o_rows = 0, o_cols = 0, d = 0;
};
MlaMatrices mla_matrices(const ModelConfig& c) {
  const MlaConfig& m = c.mla;
  const int64_t h = c.num_heads;
  MlaMatrices x;
  x.d = c.hidden_size;
  x.q_rows = h * (m.qk_nope_head_dim + m.qk_rope_head_dim);
  x.q_cols = m.q_lora_rank > 0 ? m.q_lora_rank : x.d;
  x.q_a_rows = m.q_lora_rank;
  x.kv_a_rows = int64_t{m.kv_lora_rank} + m.qk_rope_head_dim;
  x.kv_b_rows = h * (m.qk_nope_head_dim + m.v_head_dim);
  x.kv_b_cols = m.kv_lora_rank;
  x.o_rows = x.d;
  x.o_cols = h * m.v_head_dim;
  return x;
}

bool dense_mlp_layer(const ModelConfig& c, int layer) {
  return c.moe.num_experts == 0 || layer < c.moe.first_dense_layers;
}

int64_t shared_intermediate(const ModelConfig& c) {
  return int64_t{c.moe.expert_intermediate_size} * c.moe.num_shared_experts;
}

}  // namespace

Status allocate_mla_layer(const ModelConfig& c, int layer, const AllocTensor& alloc,
                          LayerWeights& lw) {
  const MlaMatrices x = mla_matrices(c);
  IB_ASSIGN_OR_RETURN(lw.wqkv.data, alloc({x.q_rows, x.q_cols}));
  if (x.q_a_rows > 0) {
    IB_ASSIGN_OR_RETURN(lw.q_a.data, alloc({x.q_a_rows, x.d}));
    IB_ASSIGN_OR_RETURN(lw.q_a_norm, alloc({x.q_a_rows}));
  }
  IB_ASSIGN_OR_RETURN(lw.kv_a.data, alloc({x.kv_a_rows, x.d}));
  IB_ASSIGN_OR_RETURN(lw.kv_a_norm, alloc({x.kv_b_cols}));
  IB_ASSIGN_OR_RETURN(lw.kv_b.data, alloc({x.kv_b_rows, x.kv_b_cols}));
  IB_ASSIGN_OR_RETURN(lw.wo.data, alloc({x.o_rows, x.o_cols}));
  if (dense_mlp_layer(c, layer)) {
    const int64_t f = c.intermediate_size;
    IB_ASSIGN_OR_RETURN(lw.w_gate_up.data, alloc({2 * f, x.d}));
    IB_ASSIGN_OR_RETURN(lw.w_down.data, alloc({x.d, f}));
    return Ok{};
  }
  IB_TRY(allocate_moe_layer(
      c, alloc,
      [&](const std::array<int64_t, 2>& shape) -> Result<WeightRef> {
        WeightRef w;  // dense (check_moe_quantization)
        IB_ASSIGN_OR_RETURN(w.data, alloc({shape[0], shape[1]}));
        return w;
      },
      lw));
  if (c.moe.num_shared_experts > 0) {
    const int64_t fs = shared_intermediate(c);
    IB_ASSIGN_OR_RETURN(lw.shared_gate_up.data, alloc({2 * fs, x.d}));
    IB_ASSIGN_OR_RETURN(lw.shared_down.data, alloc({x.d, fs}));
  }
  return Ok{};
}

void fill_dummy_mla_layer(const ModelConfig& c, uint64_t seed, int l, Backend& backend,
                          LayerWeights& lw) {
  const MlaMatrices x = mla_matrices(c);
  auto fill = [&](const Tensor& t, uint64_t stream, int64_t fan_in) {
    backend.fill_uniform(t, seed, stream, matrix_scale(fan_in));
  };
  fill(lw.wqkv.data, dummy_weight_stream(l, DummyTensor::kQ), x.q_cols);
  if (x.q_a_rows > 0) {
    fill(lw.q_a.data, dummy_mla_stream(l, DummyMlaPart::kQA), x.d);
    backend.fill_constant(lw.q_a_norm, 1.0f);
  }
  fill(lw.kv_a.data, dummy_mla_stream(l, DummyMlaPart::kKvA), x.d);
  backend.fill_constant(lw.kv_a_norm, 1.0f);
  fill(lw.kv_b.data, dummy_mla_stream(l, DummyMlaPart::kKvB), x.kv_b_cols);
  fill(lw.wo.data, dummy_weight_stream(l, DummyTensor::kO), x.o_cols);
  if (dense_mlp_layer(c, l)) {
    const int64_t f = c.intermediate_size;
    fill(lw.w_gate_up.data.slice_rows(0, f), dummy_weight_stream(l, DummyTensor::kGate), x.d);
    fill(lw.w_gate_up.data.slice_rows(f, f), dummy_weight_stream(l, DummyTensor::kUp), x.d);
    fill(lw.w_down.data, dummy_weight_stream(l, DummyTensor::kDown), f);
    return;
  }
  fill_dummy_moe_layer(c, seed, l, backend, nullptr, lw);
  if (c.moe.num_shared_experts > 0) {
    const int64_t fs = shared_intermediate(c);
    fill(lw.shared_gate_up.data.slice_rows(0, fs), dummy_mla_stream(l, DummyMlaPart::kSharedGate),
         x.d);
    fill(lw.shared_gate_up.data.slice_rows(fs, fs), dummy_mla_stream(l, DummyMlaPart::kSharedUp),
         x.d);
    fill(lw.shared_down.data, dummy_mla_stream(l, DummyMlaPart::kSharedDown), fs);
  }
}

int64_t mla_layer_bytes(const ModelConfig& c, int layer, DType dtype) {
  const auto size = static_cast<int64_t>(dtype_size(dtype));
  auto rounded = [&](int64_t numel) { return (numel * size + 255) / 256 * 256; };
  const MlaMatrices x = mla_matrices(c);
  int64_t bytes = rounded(x.q_rows * x.q_cols) + rounded(x.kv_a_rows * x.d) + rounded(x.kv_b_cols) +
                  rounded(x.kv_b_rows * x.kv_b_cols) + rounded(x.o_rows * x.o_cols);
  if (x.q_a_rows > 0) bytes += rounded(x.q_a_rows * x.d) + rounded(x.q_a_rows);
  if (dense_mlp_layer(c, layer)) {
    const int64_t f = c.intermediate_size;
    return bytes + rounded(2 * f * x.d) + rounded(x.d * f);
  }
  bytes += moe_layer_bytes(c, dtype, MatmulLayout{});
  if (c.moe.num_shared_experts > 0) {
    const int64_t fs = shared_intermediate(c);
    bytes += rounded(2 * fs * x.d) + rounded(x.d * fs);
  }
  return bytes;
}

}  // namespace detail
}  // namespace ib
