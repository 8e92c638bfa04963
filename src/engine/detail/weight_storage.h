// Internal to engine/: allocation of a model's weight tensors, the staging of quantized matmul
// weights, and the safetensors and GGUF loaders, shared by load_weights() (model_weights.cpp).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/thread_pool.h"
#include "engine/arch/architecture.h"
#include "engine/model_weights.h"
#include "model/safetensors.h"

namespace ib::detail {

// Whether a schema role is a matmul weight a checkpoint may hold quantized: one of a layer's four
// (q/k/v, o, gate/up, down) or an expert's gate/up or down.
bool is_matmul_role(WeightRole role);
// Its index among them, in matmul_shapes' order (wqkv 0, wo 1, w_gate_up 2, w_down 3).
int matmul_index(WeightRole role);
// The matmul weight a layer role names (the four, or an expert's gate/up or down), or null
// (whole-model weights, norms, biases and the router).
WeightRef* matmul_weight(ModelWeights& w, WeightRole role, int layer, int expert = -1);

// The shapes of one layer's four matmul weights, (N, K) each: wqkv, wo, w_gate_up, w_down.
std::array<std::array<int64_t, 2>, 4> matmul_shapes(const ModelConfig& c);
// Every shape a layer's weights may take a quantized format in: the four, then, in a
// mixture-of-experts model, an expert's gate/up (2F, D) and down (D, F).
std::vector<std::array<int64_t, 2>> quantizable_shapes(const ModelConfig& c);
// Whether layout's 4-bit groups tile every matmul weight's K (backend/weight.h: K % G == 0,
// G % 16 == 0): a user error naming the model, K and the fix otherwise.
Status check_groups(const ModelConfig& c, const MatmulLayout& layout);
// Whether a checkpoint's format (CheckpointQuantization::format) is 4-bit.
bool is_4bit_name(const std::string& name);
// The layout a quantized checkpoint's matmul weights arrive in (config.json's
// quantization_config), run as format.
MatmulLayout checkpoint_layout(WeightFormat format, const CheckpointQuantization& cq);
// e.g. "awq (W4A16, 4-bit weights with zero points, groups of 128)"; static_activations: a
// checkpoint's input_scale per matmul instead of per-token scales.
std::string quantization_description(const MatmulLayout& layout, bool static_activations);

// Allocates every weight tensor of config, uninitialised: dense ones at
// backend.activation_dtype(), each layer's matmul weights in layout (8-bit: data (N, K) and
// scales (N); 4-bit: backend/weight.h's tensors with the layout's group, WeightRef::asymmetric
// set), after checking that 4-bit groups tile every K and the total, with the staging scratch
// quantized weights need, against the backend's free memory and memory limit.
Result<ModelWeights> allocate_weights(const ModelConfig& config, const MatmulLayout& layout,
                                      Backend& backend);

class DenseStaging;

// A mixture-of-experts layer's weights (moe_weights.cpp): allocated (the router dense, through
// alloc, which allocates a tensor of the activation dtype and the given shape; each expert's
// gate/up (2F, D) and down (D, F) through alloc_expert, dense or quantized) and, for dummy
// weights, filled as model_weights.h describes, quantized experts through staging (null: the
// experts are dense). The layer's w_gate_up and w_down stay empty.
using AllocTensor = std::function<Result<Tensor>(std::initializer_list<int64_t>)>;
using AllocMatmul = std::function<Result<WeightRef>(const std::array<int64_t, 2>& shape)>;
Status allocate_moe_layer(const ModelConfig& config, const AllocTensor& alloc,
                          const AllocMatmul& alloc_expert, LayerWeights& layer);
void fill_dummy_moe_layer(const ModelConfig& config, uint64_t seed, int layer_index,
                          Backend& backend, DenseStaging* staging, LayerWeights& layer);
// The bytes of one (N, K) matmul weight in layout (not kGguf) with dense ones at dtype, each
// tensor rounded up to 256 bytes (matmul_layout.cpp).
int64_t matmul_weight_bytes(int64_t n, int64_t k, DType dtype, const MatmulLayout& layout);
// The bytes of one MoE layer's router (dense at dtype) and experts (in layout).
int64_t moe_layer_bytes(const ModelConfig& config, DType dtype, const MatmulLayout& layout);
// A DeepSeek-V2 layer's weights besides its two norms (mla_weights.cpp): the multi-head latent
// attention's (wqkv holding the query projection, q_a and its norm, kv_a and its norm, kv_b, wo)
// and its MLP: dense (w_gate_up, w_down) in the first first_k_dense_replace layers, else the
// router, the routed experts (allocate_moe_layer) and the shared experts. All dense.
Status allocate_mla_layer(const ModelConfig& config, int layer, const AllocTensor& alloc,
                          LayerWeights& weights);
void fill_dummy_mla_layer(const ModelConfig& config, uint64_t seed, int layer, Backend& backend,
                          LayerWeights& weights);
// Its bytes at dtype (without the two norms), each tensor rounded up to 256 bytes.
int64_t mla_layer_bytes(const ModelConfig& config, int layer, DType dtype);

// A user error when the backend cannot run config's experts (no MoeOps), or not in that
// quantized format (MoeOps::runs_quantized_experts; check_moe_quantization's refusals too); Ok
// for dense models.
Status check_moe_runs(const ModelConfig& config, WeightFormat quantization, Backend& backend);
// What check_moe_runs asks the backend about config's experts in that format: a quantized
// checkpoint's own group size and act-order, else the load-time layout's; the two widths.
QuantizedExperts quantized_experts(const ModelConfig& config, WeightFormat quantization);

// Where a loader writes a matmul weight's dense values (N, K) in the activation dtype: the
// weight's own data when it is dense, else one scratch buffer (tag kWorkspace) sized for the
// largest quantized weight, which finish() quantizes into the weight. One weight at a time:
// every dense_for() of a quantized weight returns the same memory. The scratch is freed with the
// staging; the caller synchronizes the backend first.
class DenseStaging {
 public:
  // For config's matmul weights in format; no scratch when they are dense.
  static Result<DenseStaging> create(const ModelConfig& config, WeightFormat format,
                                     Backend& backend);
  Tensor dense_for(const WeightRef& weight) const;
  // Quantizes dense (from dense_for(weight)) into weight; nothing for a dense weight.
  void finish(const Tensor& dense, const WeightRef& weight);

 private:
  explicit DenseStaging(Backend& backend) : backend_(&backend) {}
  Backend* backend_;
  Buffer scratch_;
  std::unique_ptr<ThreadPool> host_pool_;  // kGguf: the host quantization's, made at first use
};

// How load_checkpoint's errors name what it reads: the format ("safetensors"), where the config
// came from ("the config.json") and the sentence that says what to check when they disagree.
struct CheckpointKind {
  std::string_view format;
  std::string_view config;
  std::string_view config_hint;
};

// A part of a checkpoint's layers (WeightOptions::first_layer): config.num_layers of them from
// `first`, of a model of `whole` layers (0: config.num_layers, the whole model).
struct LayerRange {
  int first = 0;
  int whole = 0;
};

// Fills allocated weights from tensors under HF names (weights_safetensors.cpp): every tensor the
// architecture's schema names is checked (present, shape) before any is copied, q/k/v and
// gate/up fused, dense tensors converted to the backend dtype, quantized matmul weights staged.
// With a layer range, the checkpoint is checked against the whole model's schema and only the
// range's layers (and the embedding, final norm and LM head) are copied.
Status load_checkpoint(const ModelConfig& config, const SafetensorsCheckpoint& checkpoint,
                       const CheckpointKind& kind, Backend& backend, DenseStaging& staging,
                       ModelWeights& weights, LayerRange layers = {});

// load_checkpoint on an HF safetensors checkpoint (file or directory).
Status load_safetensors(const ModelConfig& config, const std::string& path, Backend& backend,
                        DenseStaging& staging, ModelWeights& weights, LayerRange layers = {});

// load_checkpoint on a GGUF file (weights_gguf.cpp): each tensor dequantized to f32 on the host
// (read_gguf_tensor_f32), renamed to its HF name, llama's q/k rows put back in HF order; the
// matmul weights allocated as kGguf (MatmulLayout::gguf) copied in their blocks instead.
Status load_gguf(const ModelConfig& config, const std::string& path, Backend& backend,
                 DenseStaging& staging, ModelWeights& weights);
// The row segments of each layer's four matmul weights (wqkv, wo, w_gate_up, w_down) as a GGUF
// file stores them (MatmulLayout::gguf): count 0 for a weight with a source in a float type.
Result<std::vector<std::array<GgufRows, 4>>> gguf_matmul_rows(const ModelConfig& config,
                                                              const std::string& path);
// The same for dummy weights in llama.cpp's Q4_K_M mix (model/gguf_model.h's GgufTypeMix, with
// q / k / v, o, gate / up and down named as llama.cpp names them). User errors: a model whose
// matmul weights are not whole 256-element blocks, mixture-of-experts or MLA models.
Result<std::vector<std::array<GgufRows, 4>>> dummy_gguf_rows(const ModelConfig& config);
// A kGguf weight quantized at load from dense (N, K) in the activation dtype: copied to the host,
// each row quantized by core/ggml_blocks.h in its segment's type on pool, copied back.
void quantize_gguf_weight(Backend& backend, ThreadPool& pool, const Tensor& dense,
                          const WeightRef& weight);

}  // namespace ib::detail
