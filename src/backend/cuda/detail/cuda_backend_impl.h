// CudaBackend: the Backend interface on one CUDA device. Every allocation goes through
// Backend::alloc (tracked, a device OOM becomes an error); all work is enqueued on one
// non-blocking stream; every CUDA / cuBLASLt call is checked and names its op. Ops never
// synchronize or allocate, so a decode step can be captured in a CUDA graph; kernel choices
// depend only on shapes and the host-side hints in the metadata.
// A failed CUDA call inside an op becomes the backend's sticky device_status() (the op is
// abandoned, later ops are skipped), so the engine can report it and the run can end cleanly.
#pragma once

#include <cuda_runtime_api.h>

#include <array>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/detail/check.h"
#include "backend/cuda/detail/gemm_lt.h"
#include "backend/cuda/detail/kernels.h"
#include "backend/cuda/detail/lora_kernels.h"

namespace ib::cuda {

struct MoeKernelChoice;  // moe_kernels.h

enum class AttentionPath { kAuto, kSplitKv, kFlash };

class CudaBackend final : public Backend,
                          public FusedDecodeOps,
                          public MoeOps,
                          public MlaOps,
                          public LoraOps,
                          public VisionOps {
 public:
  static constexpr size_t kGemmWorkspaceBytes = size_t{32} << 20;
  static constexpr size_t kAttentionWorkspaceBytes = size_t{64} << 20;
  static constexpr size_t kStagingBytes = size_t{16} << 20;
  static constexpr size_t kAttentionCounterBytes = size_t{1} << 20;  // split-KV merge counters
  // sync_counters_' words, zero between launches: IB_LORA_FUSED's block counters (lora.cu), then
  // from byte kLoraSyncOffset the kLoraSyncSets flag sets of IB_LORA_IN_GEMV=4 (GemvLora::sync).
  static constexpr size_t kLoraSyncOffset = 16;
  static_assert(kLoraFusedCounterBytes <= kLoraSyncOffset);
  static constexpr size_t kLoraCounterBytes =
      kLoraSyncOffset + size_t{kLoraSyncSets} * kLoraSyncWords * sizeof(unsigned);
  // Then from byte kLoraCounterBytes IB_QUANT_SYNC's two flag sets of two words
  // (GemvQuantAct::sync).
  static constexpr int kQuantSyncSets = 2, kQuantSyncWords = 2;
  // Then IB_LORA_ATTN's counter (AttnLora::counter).
  static constexpr size_t kAttnLoraCounterOffset =
      kLoraCounterBytes + size_t{kQuantSyncSets} * kQuantSyncWords * sizeof(unsigned);
  static constexpr size_t kSyncCounterBytes = kAttnLoraCounterOffset + sizeof(unsigned);
  // IB_LORA_ATTN's scratch (attn_lora_buf_, allocated when the switch is set): u, then the
  // finishing blocks' partials for up to 8 tokens, kAttnLoraMaxChunks (token, KV-head chunk)
  // blocks and three targets of the largest fused rank.
  static constexpr int64_t kAttnLoraMaxChunks = 64;
  static constexpr int64_t kAttnLoraPartialFloats =
      8 * kAttnLoraMaxChunks * LoraOps::kMaxLoraGroup * kGemvLoraMaxRank;
  // The chained LoRA shrinks' accumulators (IB_LORA_IN_GEMV=3, GemvLora::next_u): three, as a
  // decode layer has three chained shrinks in flight at most (o -> gate/up -> down -> next q/k/v).
  static constexpr int kLoraChains = 3;
  static constexpr size_t kLoraChainBytes = kLoraChains * kGemvLoraChainFloats * sizeof(float);
  // Activations quantized (W8A8) or normalised (W8A16) for the GEMV and cuBLASLt, allocated with
  // the first quantized weight: the row scales first, then the rows.
  static constexpr int64_t kQuantScratchBytes = int64_t{64} << 20;
  static constexpr int64_t kQuantScaleBytes = int64_t{256} << 10;
  // The fused ops' fallback (normed_for_fallback): the normalised x after the scales, then its
  // matmul's output (fallback_scratch).
  static constexpr int64_t kFallbackXnBytes = int64_t{1} << 20;

  static Result<std::unique_ptr<CudaBackend>> create(int device, DType dtype,
                                                     std::optional<int64_t> memory_limit_bytes);
  ~CudaBackend() override;

  DeviceInfo device_info() const override;
  DType activation_dtype() const override { return dtype_; }

  void copy_from_host(Tensor dst, const void* src, DType src_dtype) override;
  void copy_to_host(const Tensor& src, void* dst) override;
  void copy_on_device(Tensor dst, const Tensor& src) override;
  void synchronize() override;
  void fill_uniform(Tensor dst, uint64_t seed, uint64_t stream, float scale) override;
  void fill_constant(Tensor dst, float value) override;
  void embedding(const Tensor& token_ids, const Tensor& table, Tensor out) override;
  void rms_norm(const Tensor& x, const Tensor& weight, float eps, Tensor out) override;
  void add_rms_norm(Tensor residual, const Tensor& x, const Tensor& weight, float eps,
                    Tensor out) override;
  void norm_add_rms_norm(Tensor residual, Tensor x, const Tensor& x_weight, const Tensor& weight,
                         float eps, Tensor out) override;
  void matmul(const Tensor& x, const WeightRef& w, const Tensor* bias, Tensor out) override;
  bool supports_weight_format(WeightFormat format) const override;
  void quantize_weight(const Tensor& dense, const WeightRef& out) override;
  void weight_row_sums(const WeightRef& w, Tensor out) override;
  // Calibration: the observer sees each quantized matmul's input (on the device; it copies what
  // it keeps), and the fused decode ops are off meanwhile so that every input passes matmul().
  bool set_matmul_observer(MatmulObserver observer) override {
    observer_ = std::move(observer);
    return true;
  }
  Status prepare_weight(const WeightRef& w) override { return reserve_quant_scratch(w); }
  void rope_and_cache(Tensor qkv, const Tensor& positions, const Tensor& slot_mapping,
                      const Tensor& inv_freq, const KvCacheLayer& kv,
                      const AttentionShape& shape) override;
  void attention(const Tensor& qkv, const KvCacheLayer& kv, const AttentionMetadata& meta,
                 const AttentionShape& shape, Tensor out) override;
  void silu_mul(const Tensor& gate_up, Tensor out) override;
  void gelu_tanh_mul(const Tensor& gate_up, Tensor out) override;
  void affine(Tensor x, float mul, float add) override;
  void softcap(Tensor x, float cap) override;
  bool fused_decode_fits(const AttentionShape& shape, int64_t hidden_size,
                         int64_t intermediate_size) const override;
  bool fused_decode(int64_t num_tokens) const override;
  FusedDecodeOps* fused_decode_ops() override { return this; }
  bool fused_lora(int64_t rank) const override {
    return lora_in_gemv_ > 0 && rank % 8 == 0 && rank <= kGemvLoraMaxRank;
  }
  bool fused_lora_lookahead() const override { return lora_in_gemv_ == 5; }
  void lora_before_attention(const Tensor& a, const Tensor& residual,
                             const FusedLora* lora) override;
  void rms_matmul_rope_cache(const Tensor& h, const Tensor* gain, const WeightRef& w,
                             const Tensor* bias, float eps, const Tensor& positions,
                             const Tensor& slot_mapping, const Tensor& inv_freq,
                             const KvCacheLayer& kv, const AttentionShape& shape, Tensor qkv,
                             const FusedLora* lora = nullptr) override;
  void rms_matmul_swiglu(const Tensor& h, const Tensor* gain, const WeightRef& w, float eps,
                         Tensor out, const FusedLora* lora = nullptr) override;
  void matmul_add(const Tensor& x, const WeightRef& w, Tensor residual,
                  const FusedLora* lora = nullptr) override;
  MoeOps* moe_ops() override { return this; }
  void moe_route(const Tensor& router_logits, bool renormalize, Tensor expert_ids,
                 Tensor expert_weights, Tensor expert_tokens) override;  // moe_ops.cpp
  bool routes_grouped() const override { return true; }
  bool fuses_shared_experts() const override { return moe_shared_; }
  void moe_route_grouped(const Tensor& router_logits, const MoeRouting& routing, Tensor expert_ids,
                         Tensor expert_weights, Tensor expert_tokens) override;
  void moe_experts(const Tensor& x, const Tensor& expert_ids, const Tensor& expert_weights,
                   std::span<const WeightRef> gate_up, std::span<const WeightRef> down,
                   Tensor out) override;
  // 4-bit W4A16 experts (awq / gptq) in groups of a multiple of 128 without act-order, D and F
  // multiples of 128 (moe_int4.cu); other formats are dense-only here (moe_ops.cpp).
  bool runs_quantized_experts(const QuantizedExperts& experts) const override;
  std::string quantized_experts_taken() const override {
    return "awq / gptq 4-bit in groups of a multiple of 128 without act-order, D and F "
           "multiples of 128";
  }
  bool fuses_experts_add_norm() const override { return moe_add_norm_ != 0; }
  void moe_experts_add_rms_norm(const Tensor& x, const Tensor& expert_ids,
                                const Tensor& expert_weights, std::span<const WeightRef> gate_up,
                                std::span<const WeightRef> down, Tensor residual,
                                const Tensor& norm_weight, float eps, Tensor normed) override;
  // IB_CUDA_MLA (set_mla, default 1): offered to the engine (mla_ops.cpp); 0 withdraws them.
  MlaOps* mla_ops() override { return mla_ ? this : nullptr; }
  void set_mla(bool on) { mla_ = on; }
  // IB_MLA_SPLIT (default 1): mla_attention as three kernels split across blocks (mla_split.cu)
  // instead of the fused block per (token, head) (mla.cu).
  void set_mla_split(bool on) { mla_split_ = on; }
  bool mla_split() const { return mla_split_; }
  // IB_MOE_TILES (default 2): moe_experts on chunks of at most this many tokens runs the tile
  // kernels (moe_tiles.cu) with the same blocks for every expert slot.
  void set_moe_tile_tokens(int64_t tokens) { moe_tile_tokens_ = tokens; }
  // IB_MOE_WIDE (default 1): chunks of at most this many tokens (before IB_MOE_TILES) run the tile
  // kernels with tiles of 16 weight rows and one pair a pass: twice the bytes in flight per pass
  // where each expert has one pair (single-token steps).
  void set_moe_wide_tokens(int64_t tokens) { moe_wide_tokens_ = tokens; }
  // IB_MOE_BALANCE (default 8): larger chunks of at most this many tokens run the tile kernels
  // with their work items (tile, expert) spread evenly over a grid of the device's resident
  // blocks; larger ones still (and all with both 0) a warp per weight row (moe.cu).
  void set_moe_balance_tokens(int64_t tokens) { moe_balance_tokens_ = tokens; }
  // IB_MOE_WARPS (default 8): chunks of at most this many tokens (after IB_MOE_WIDE's, before
  // IB_MOE_TILES and IB_MOE_BALANCE) run the balanced grid with each work item (tile, expert) a
  // warp's, its sums met by shuffles.
  void set_moe_warp_tokens(int64_t tokens) { moe_warp_tokens_ = tokens; }
  int64_t moe_warp_tokens() const { return moe_warp_tokens_; }
  // IB_MOE_WARP_RING (default 0): the warp form's weights and x through a per-warp cp.async ring
  // in shared memory (chunks of at most 8 tokens).
  void set_moe_warp_ring(bool on) { moe_warp_ring_ = on; }
  // IB_MOE_GEMM (default 32): moe_experts calls of at least this many tokens (past the tile forms'
  // sizes) run the grouped tensor-core GEMM (moe_gemm.cu) where it takes the shapes; 0: never (the
  // warp-per-row kernels).
  void set_moe_gemm_tokens(int64_t tokens) { moe_gemm_tokens_ = tokens; }
  int64_t moe_gemm_tokens() const { return moe_gemm_tokens_; }
  // The moe_experts calls that ran the grouped GEMM so far (tests).
  int64_t moe_gemm_launches() const { return moe_gemm_launches_; }
  // IB_QUANT_GEMM (default 64): weight-only quantized matmuls (W4A16, NF4, INT8 W8A16) of at most
  // this many rows that the decode GEMV does not take run the tensor-core GEMM that converts the
  // codes stage by stage (quant_gemm.cu); larger ones, and all with 0, dequantize the weight for
  // cuBLASLt. Set it before the weights load: its scratch is reserved with the first such weight.
  void set_quant_gemm_rows(int64_t rows) { quant_gemm_rows_ = rows; }
  int64_t quant_gemm_rows() const { return quant_gemm_rows_; }
  // The matmuls that ran it so far (tests).
  int64_t quant_gemm_launches() const { return quant_gemm_launches_; }
  // IB_MOE_SHARED (default 0): MoeOps::fuses_shared_experts, read when a model loads.
  void set_moe_shared(bool on) { moe_shared_ = on; }
  // IB_MOE_PDL (default 1): the MoE kernels (router, experts, combine) launched with
  // programmatic dependent launch where IB_PDL is on, like the other decode kernels.
  void set_moe_pdl(bool on) { moe_pdl_ = on; }
  // IB_MOE_INT4_RING (default 0): the 4-bit experts' ring form for chunks of <= 8 tokens
  // (moe_int4.cu).
  void set_moe_int4_ring(bool on) { moe_int4_ring_ = on; }
  // IB_MOE_ADD_NORM (default 0): MoeOps::fuses_experts_add_norm (Mixtral's decode steps on the
  // fused decode ops, the layers ending in the experts' combine with the residual add and the
  // next input norm): 1 in one kernel (a block per token); 2 as the experts' own combine (its
  // blocks across the features) and then the add + norm kernel.
  void set_moe_add_norm(int mode) { moe_add_norm_ = mode; }
  // Tests: the attention workspace (the ops' scratch) filled with 0xFF bytes, NaN in every float
  // dtype, so a kernel that leaves its part of the scratch unwritten shows (moe_ops.cpp).
  void poison_workspace();
  bool mla() const { return mla_; }
  void mla_rope_and_cache(Tensor q, Tensor latent, const Tensor& kv_norm, float eps,
                          const Tensor& positions, const Tensor& slot_mapping,
                          const Tensor& inv_freq, const KvCacheLayer& kv,
                          const MlaShape& shape) override;  // mla_ops.cpp
  void mla_attention(const Tensor& q, const WeightRef& kv_b, const KvCacheLayer& kv,
                     const AttentionMetadata& meta, const MlaShape& shape, Tensor out) override;
  LoraOps* lora_ops() override { return this; }
  void lora_apply(const Tensor& x, const Tensor& slot_ids, const Tensor& a, const Tensor& b,
                  const Tensor& scales, int64_t row_offset, Tensor out) override;  // lora_ops.cpp
  void lora_lookahead_matrix(const Tensor& a_next, const Tensor& w, const Tensor& a,
                             const Tensor& b, float scale, Tensor m) override;
  void lora_apply_group(const Tensor& x, const Tensor& slot_ids,
                        std::span<const LoraTargetStacks> targets, const Tensor& scales,
                        Tensor out) override;
  VisionOps* vision_ops() override { return this; }
  void layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps,
                  Tensor out) override;  // vision_ops.cpp
  void add(Tensor x, const Tensor& y) override;
  void activation(Tensor x, VisionActivation act) override;
  void bidirectional_attention(const Tensor& qkv, int64_t seq_len, int num_heads, float scale,
                               Tensor out) override;
  void rotary_rows(Tensor qkv, const Tensor& cos, const Tensor& sin, int num_heads) override;
  void unfold_patches(const Tensor& pixels, int64_t patch, Tensor out) override;
  void scale_columns(const WeightRef& w, const Tensor& gain) override;
  void gather_rows(const Tensor& x, const Tensor& row_ids, Tensor out) override;
  void sample(const Tensor& logits, const SamplingMetadata& meta, Tensor out_tokens) override;

  bool supports_graphs() const override { return true; }
  Status begin_capture() override;
  Result<std::unique_ptr<DeviceGraph>> end_capture() override;
  void timer_start() override;
  void timer_stop() override;
  std::optional<int64_t> timer_elapsed_ns() override;
  double copy_ceiling_bytes_per_s() const override { return copy_ceiling_bytes_per_s_; }
  Status device_status() const override;
  Status supports_attention(const AttentionShape& shape) const override;
  KernelSwitches kernel_switches() const override;  // switches.cpp

  cudaStream_t stream() const { return stream_; }
  int device() const { return device_; }
  int num_sms() const { return num_sms_; }
  // The tensor-core GEMV takes matmuls with M <= gemv_max_m and a weight of at most
  // gemv_max_weight_bytes; cuBLASLt takes the rest (0: always cuBLASLt). The defaults come from
  // the H200 measurements in bench/NOTES.md: cuBLASLt wins from M = 16, and on the large
  // decode matrices (gate_up, down) it streams slightly faster than the GEMV.
  int gemv_max_m() const { return gemv_max_m_; }
  // Setting the rule explicitly (tests, the op benchmark) also turns tuning off.
  void set_gemv_max_m(int m) {
    gemv_max_m_ = m;
    tuning_ = false;
  }
  void set_gemv_max_weight_bytes(int64_t bytes) { gemv_max_weight_bytes_ = bytes; }
  // FP8 weights: the GEMV takes matmuls of at most this many rows (<= 8), cuBLASLt's
  // E4M3 GEMM the rest. Default 8: on the H200 the GEMV won at 1-8 rows on every Llama-3-8B
  // shape and cuBLASLt from 16 on all but o (bench/NOTES.md, FP8 run 3).
  void set_fp8_gemv_max_m(int m) { fp8_gemv_max_m_ = m; }
  void set_attention_path(AttentionPath path) { attention_path_ = path; }
  // false: matmul_add always on the fused GEMV, never cuBLASLt with beta = 1.
  void set_add_with_cublaslt(bool on) { add_with_cublaslt_ = on; }
  // Matmuls with at most this many rows time the GEMV and cuBLASLt's top algorithms on their
  // first call (outside graph capture) and keep the fastest for their shape; 0 turns it off.
  static constexpr int kTuneMaxM = 16;
  void set_tuning(bool on) { tuning_ = on; }
  // Matmuls of at most this many rows take the GEMV wherever the static rule does, untimed: 1 by
  // default (IB_MATMUL_TUNING=1): timed alone, cuBLASLt won some decode shapes (DeepSeek-V2-Lite's
  // shared experts' gate/up), but in the step the GEMV overlaps its neighbours under programmatic
  // dependent launch, which cuBLASLt's kernels do not (bench/NOTES.md, "Wider expert tiles");
  // IB_MATMUL_TUNING=2: 0 (single rows tuned too); =3: kTuneMaxM (every row count the rule
  // sends to the GEMV, at most its gemv_max_m).
  void set_gemv_rule_rows(int rows) { gemv_rule_rows_ = rows; }
  // IB_GEMM_M_BUCKETS: cuBLASLt plans per row bucket (GemmLt::set_m_buckets, 0 or 1-16 an octave)
  // instead of per M; on, a scratch of kGemmPrewarmBytes for the prewarm launches' output
  // (without it, where it cannot be allocated, the buckets run without a prewarm). A backend
  // made here has none; the backend factory applies the switch's default, 4.
  static constexpr size_t kGemmPrewarmBytes = size_t{16} << 20;
  void set_gemm_m_buckets(int per_octave);
  int gemm_m_buckets() const;
  // IB_GEMM_TUNE=1: each bucket's algorithm the fastest of cuBLASLt's first candidates, timed at
  // the bucket's M when its shape is prewarmed (GemmLt::BucketTuning; its scratch, up to
  // GemmLt::kTuneScratchMaxBytes, allocated for each shape's pass and freed after). A backend
  // made here has none; the backend factory applies the switch's default, on.
  void set_gemm_tuning(bool on);
  bool gemm_tuning() const;
  // The cuBLASLt GEMMs' plans (tests).
  const GemmLt& gemm() const { return *gemm_; }
  // Times the heuristic's first GemmLt::kTuneCandidates algorithms for out = x @ w^T at x's exact
  // row count, each by time_ms, on the backend's workspace and stream, and keeps the fastest for
  // that shape's plan (GemmLt::tune; benchmarks, never during a capture). Returns its ms.
  float tune_gemm(const Tensor& x, const Tensor& w, Tensor out, const GemmLt::TimeFn& time_ms);
  // Programmatic dependent launch for the decode path's own kernels (not cuBLASLt's), IB_PDL:
  // 0 off; 1 every kernel lets the next one launch as it starts; 2 the same except the split-KV
  // attention, whose successor (the o GEMV, whose weight loads would compete with the attention's
  // dependent loads) launches at its end (measured on the H200, 2 against 0: Llama-3-8B bf16
  // batch 1 +4.3 %, the seed protocol +2.3 %, fp8 batch 1 +6.6 %, awq -0.6 %; bench/NOTES.md, "PDL,
  // third try"; bench/results/h200/pdl/); 3 (the default) as 2, except that where the model has
  // W8A8 weights (FP8, INT8 W8A8), whose o projection's successor is the one-block activation
  // quantize kernel, not a GEMV that prefetches, the attention triggers early, so that kernel
  // waits resident instead of launching at the attention's end (3 against 2 on an H100: fp8
  // batch 1 +0.5 %, int8-w8a8 +0.2 %; bench/results/h100/x-shared/run6).
  void set_pdl(int mode) {
    pdl_ = mode != 0;
    pdl_attention_trigger_early_ = mode == 1;
    pdl_attention_early_w8a8_ = mode == 3;
  }
  int pdl_mode() const {
    return !pdl_ ? 0 : pdl_attention_trigger_early_ ? 1 : (pdl_attention_early_w8a8_ ? 3 : 2);
  }
  // The fused decode ops (IB_FUSED=0 turns them off, for an A/B against the unfused ops).
  void set_fused(bool on) { fused_ = on; }
  // Each LoRA group's shrink and expand in one launch (IB_LORA_FUSED=1) instead of two.
  void set_lora_fused(bool on) { lora_fused_ = on; }
  // The LoRA shrink and expand under programmatic dependent launch when IB_PDL is on
  // (IB_LORA_PDL, default 1; bench/NOTES.md "LoRA decode: a kernel timeline").
  void set_lora_pdl(bool on) { lora_pdl_ = on; }
  // Decode steps with adapters on the fused decode ops, each LoRA update's expand in the GEMV's
  // epilogue (IB_LORA_IN_GEMV): 1 a shrink launch before each GEMV (bitwise reproducible); 3
  // chained shrinks: where an op's FusedLora names the next op's targets
  // (`next`), its GEMV accumulates that op's shrink from the outputs it stores, so a decode layer
  // launches one shrink (o's, which also zeroes the accumulators; measured slower than 1 once
  // 2 was removed: bench/NOTES.md, "Removing the in-launch shrink"); 0 the unfused ops and
  // LoraOps; 4 as 1, but each dense GEMV waits for its shrink by flags (GemvLora::sync: it
  // launches and streams its weights while the shrink waits for x, and reads u only before its
  // epilogue), the same arithmetic as 1, bit for bit; 5 (the default) as 1, but an op whose
  // FusedLora carries next_m (o, down) computes the next rms op's shrink in its own shrink's
  // launch from the lookahead matrices (lookahead_lora_shrink), so a decode layer launches two
  // shrinks (bench/NOTES.md, "Lookahead LoRA shrinks"). (2, the
  // shrink's blocks in the GEMV's own launch, measured slower and was removed.)
  void set_lora_in_gemv(int mode) {
    lora_in_gemv_ = mode;
    reset_lora_chains();
  }
  // IB_LORA_ATTN=1 (with IB_LORA_IN_GEMV=5): o's lookahead shrink computed by the decode
  // attention's finishing blocks instead of a launch before o's GEMV, where the lean split-KV
  // form runs (lora_before_attention; bench/NOTES.md, "o's lookahead inside the attention").
  Status set_lora_attn(bool on);
  bool lora_attn() const { return lora_attn_; }
  // The attentions that computed o's lookahead so far (tests).
  int64_t attn_lora_launches() const { return attn_lora_launches_; }
  // The shrinks launched by the fused ops with LoRA so far (tests: chained shrinks launch none).
  int64_t lora_shrink_launches() const { return lora_shrink_launches_; }
  // The shrink / GEMV pairs that met by flags so far (IB_LORA_IN_GEMV=4), and the flag sets'
  // words after the stream's work (tests: zero between pairs).
  int64_t lora_sync_pairs() const { return lora_sync_pairs_; }
  std::vector<unsigned> lora_sync_words();
  // IB_QUANT_SYNC's flag sets handed to quantized GEMVs so far, and their words after the
  // stream's work (tests: zero between pairs).
  int64_t quant_sync_pairs() const { return quant_sync_pairs_; }
  std::vector<unsigned> quant_sync_words();
  // The split-KV attention's blocks prefetch their K and V rows into L2 before their loads in
  // steps of at most this many sequences (0: never). Default 8, measured best of 1, 8, 32 and
  // 256: +2 % at batch 1 and on the seed's batch 8, even on the continuous run, -3 % when every
  // step prefetches (bench/NOTES.md, phase 5; bench/results/h200/no-regression-ab/).
  void set_attention_prefetch_max_seqs(int n) { attention_prefetch_max_seqs_ = n; }
  // IB_ATTN_LEAN (0-2, default 1): the split-KV attention's latency-lean form where it exists
  // (launch_attention_split_kv; the modes in backend/kernel_switches.cpp).
  void set_attention_lean(int mode) { attention_lean_ = mode; }
  int attention_lean() const { return attention_lean_; }
  // The attention launches that ran the lean form so far (tests: it runs where it exists).
  int64_t attention_lean_launches() const { return attention_lean_launches_; }
  // IB_ATTN_MMA (default 128): decode steps of at least this many sequences run the tensor-core
  // decode kernel (attention_decode_mma.cu) where it takes the shapes; 0: never (the split-KV
  // kernel).
  void set_attention_mma_min_seqs(int n) { attention_mma_min_seqs_ = n; }
  int attention_mma_min_seqs() const { return attention_mma_min_seqs_; }
  // The attention launches that ran the tensor-core decode kernel so far (tests).
  int64_t attention_mma_launches() const { return attention_mma_launches_; }
  // IB_ATTN_MIXED (default 16): a batch mixing prefill chunks and decode tokens runs
  // its leading one-token sequences (AttentionMetadata::decode_prefix), when at least this many,
  // on the decode kernels and the rest on the flash kernel; 0: the whole batch on flash.
  void set_attention_mixed_min_seqs(int n) { attention_mixed_min_seqs_ = n; }
  int attention_mixed_min_seqs() const { return attention_mixed_min_seqs_; }
  // The attention launches that split a mixed batch so far (tests).
  int64_t attention_mixed_launches() const { return attention_mixed_launches_; }
  // IB_ATTN_MMA_PERSIST (default 0): the tensor-core decode attention's blocks an SM, each taking
  // items in turn; 0, a block per (sequence, KV head) (launch_attention_decode_mma).
  void set_attention_mma_persist(int blocks_per_sm) {
    attention_mma_persist_ = blocks_per_sm;
    attention_mma_blocks_ = blocks_per_sm * num_sms_;
  }
  // The same as a total number of blocks (tests: a few blocks taking many items each).
  void set_attention_mma_blocks(int blocks) { attention_mma_blocks_ = blocks; }
  // IB_ATTN_E4M3_F16 (default on): a bf16 model's E4M3 cache converted to fp16 and the tensor-core
  // decode attention's MMAs in fp16 (launch_attention_decode_mma).
  bool attention_e4m3_f16() const { return attention_e4m3_f16_; }
  void set_attention_e4m3_f16(bool on) { attention_e4m3_f16_ = on; }
  // Synchronize after every op so an asynchronous fault is reported under the op that caused it
  // (tests and debugging; never in a timed run).
  void set_debug_sync(bool on) { debug_sync_ = on; }
  // The switches the environment set (apply_cuda_switches), reported as "env" rather than
  // "default" by kernel_switches().
  void set_switches_from_env(std::set<std::string> names) { switches_from_env_ = std::move(names); }

 protected:
  Result<void*> raw_alloc(size_t bytes) override;
  void raw_free(void* ptr, size_t bytes) override;

 private:
  // The MoE expert kernels' forms from the IB_MOE_* switches (moe_ops.cpp).
  MoeKernelChoice moe_kernel_choice() const;
  friend class CudaGraph;
  CudaBackend(int device, DType dtype) : device_(device), dtype_(dtype) {}
  Status init();
  // attention()'s decode part: the tensor-core kernel or split-KV (cuda_backend.cpp).
  // IB_LORA_ATTN: o's operands recorded by lora_before_attention for the next attention
  // (armed), and what that attention computed for o's op (done: fused_lora_operands takes it).
  struct AttnLoraPending {
    bool armed = false, done = false;
    AttnLora params;
    const void* a = nullptr;         // the attention's output, o's x
    const void* residual = nullptr;  // o's output
    const FusedLora* lora = nullptr;
    int64_t rows = 0;
    int chain = 0;  // the lora_chains_ accumulator params.u_next points at
  };
  void decode_attention(const Tensor& qkv, const KvCacheLayer& kv, const AttentionMetadata& meta,
                        const AttentionShape& shape, Tensor out,
                        const AttnLoraPending* lora = nullptr);
  // IB_LORA_ATTN: where the attention before this op computed its shrink and the next op's
  // (attn_lora_pending_.done, for this x, out and lora), l.u and the chain left pending as
  // lookahead_lora_shrink leaves them; false otherwise. Either way the record is spent.
  bool take_attention_lora(const Tensor& x, const FusedLora& lora, const Tensor* out, GemvLora& l);
  // Times a large device-to-device copy (best of several) into copy_ceiling_bytes_per_s_.
  Status measure_copy_ceiling();
  // Makes this backend's device current for the calling thread.
  void bind() const;
  // Runs one op's host side: skipped after a device error; a CudaFailure becomes the sticky
  // error; with debug sync (outside capture) the op is waited for, so a fault names it.
  template <typename F>
  void run_op(const char* op, F&& body) {
    if (!error_.empty()) return;
    try {
      bind();
      std::forward<F>(body)();
      if (debug_sync_ && !capturing_) IB_CUDA_CHECK(cudaStreamSynchronize(stream_), op);
    } catch (const CudaFailure& e) {
      record_failure(e.what());
    }
  }
  void record_failure(const std::string& message);
  void matmul_quantized(const Tensor& x, const WeightRef& w, const Tensor* bias, Tensor out);
  // The most rows a quantized weight's matmul runs on its GEMV (FP8: fp8_gemv_max_m_).
  int64_t quant_gemv_rows(WeightFormat format) const;
  // Whether a fused op on a kGguf weight takes launch_rms_gemv_gguf (up to 8 tokens, no adapters).
  bool gguf_fused(const Tensor& h, const Tensor* gain, const WeightRef& w,
                  const FusedLora* lora) const;
  // A kGguf weight's matmul (weight.h): out = x' @ w^T (+ bias), or += with accumulate; the GEMV
  // up to 8 tokens, else the weight dequantized for cuBLASLt with x' in chunks of rows.
  void matmul_gguf(const Tensor& x, const WeightRef& w, const Tensor* bias, Tensor out,
                   bool accumulate);
  // quantize_weight's scratch for the weight format: the activations' (any), the dequantized
  // weight's (W8A16, grown to the largest weight) and the int32 sums' (W8A8 INT8).
  Status reserve_quant_scratch(const WeightRef& w);
  // Views of the scratch for x's quantized rows and scales (the decode GEMV's input).
  GemvQuantAct quant_act(const Tensor& x, const WeightRef& w) const;  // empty for a dense w
  // w (W8A16, 4-bit) dequantized into dequant_scratch_, in x's column order.
  Tensor dequantized(const WeightRef& w);
  // out = x @ w^T (+ bias), or += with accumulate, on the weight-only GEMM where IB_QUANT_GEMM
  // and its shapes allow (true), else nothing (false: the caller dequantizes).
  bool quant_gemm(const Tensor& x, const WeightRef& w, const Tensor* bias, Tensor out,
                  bool accumulate);
  Tensor normed_for_fallback(const Tensor& h, const Tensor* gain, float eps);
  // A fused decode op's LoRA update (FusedLora) for an output of out_row_size columns: the GEMV
  // epilogue's operands (GemvLora, u in the attention workspace), the shrink (of x, or with norm
  // of rms_norm(x) * gain) launched now (lora_ops.cpp).
  // With IB_LORA_IN_GEMV=3 the op's shrink may be a chain the op before it left (take_lora_chain)
  // and, where out is the op's output (null: the q/k/v op, whose output no op shrinks) and
  // lora.next is set, the op's GEMV chains the next op's shrink (chain_lora_shrink).
  GemvLora fused_lora_operands(const Tensor& x, const LoraShrinkNorm* norm, const FusedLora& lora,
                               int64_t out_row_size, bool gemv, const WeightRef& w,
                               const Tensor* out);
  // IB_LORA_IN_GEMV=5: where lora.next_m applies, the op's shrink into l.u and the next op's
  // (un-normalised, from the lookahead matrices and out before the op) into a chain accumulator
  // left pending for that op, in one launch; false (nothing launched) where it does not.
  bool lookahead_lora_shrink(const Tensor& x, const FusedLora& lora, const WeightRef& w,
                             const Tensor* out, GemvLora& l);
  // The chained shrinks' host-side state, mirroring the accumulators' on the device: pending (a
  // GEMV accumulates the shrink of the op reading x), zeroed (a launched shrink zeroed it since
  // its last use). Reset where the host cannot follow the device: a capture's start and end, a
  // graph replay, a mode change.
  struct LoraChain {
    bool pending = false, zeroed = false;
    const void* x = nullptr;         // the op output the chain shrinks (the next op's input)
    const void* slot_ids = nullptr;  // the producer's: the tokens' slots the chain used
    int64_t rows = 0, rank = 0;
    std::array<const void*, LoraOps::kMaxLoraGroup> a{};  // the next op's targets' A stacks
    size_t count = 0;
  };
  // The first chained-shrink accumulator no op has pending; -1: none.
  int free_lora_chain() const;
  void reset_lora_chains() {
    lora_chains_ = {};
    attn_lora_pending_ = {};
  }
  // A chain left pending for the op reading out next (lora.next's targets, this op's slots).
  static LoraChain pending_lora_chain(const Tensor& out, const FusedLora& lora, int64_t rank);
  float* lora_chain_u(int i) const;
  // The word of sync_counters_ at offset_bytes (IB_LORA_FUSED's counters at 0, the flag sets of
  // IB_LORA_IN_GEMV=4 at kLoraSyncOffset and of IB_QUANT_SYNC at kLoraCounterBytes).
  unsigned* counter_at(size_t offset_bytes) const {
    return reinterpret_cast<unsigned*>(static_cast<unsigned char*>(sync_counters_.data()) +
                                       offset_bytes);
  }
  // Flag set i of `words` words from offset_bytes (the sets alternate between a kind's pairs).
  unsigned* flag_set(size_t offset_bytes, int words, int64_t i) const {
    return counter_at(offset_bytes) + i * words;
  }
  // count words of sync_counters_ from offset_bytes, after the stream's work.
  std::vector<unsigned> counter_words(size_t offset_bytes, size_t count);
  // The pending chain whose shrink is this op's (x, its slot ids, its targets' A, its rank; an rms
  // op needs a dense weight, whose GEMV applies 1 / rms itself, and a folded gain), or -1; every
  // pending chain is spent either way.
  int take_lora_chain(const Tensor& x, const FusedLora& lora, int64_t rank,
                      const LoraShrinkNorm* norm, const WeightRef& w, bool gemv);
  void chain_lora_shrink(GemvLora& l, const FusedLora& lora, const Tensor& out);
  // That update's expand into out (T, out_row_size), for the fused ops' unfused fallbacks.
  void fused_lora_expand(const GemvLora& l, const FusedLora& lora, Tensor out);
  Tensor fallback_scratch(int64_t rows, int64_t cols);
  // Whether the tensor-core GEMV runs this matmul (else cuBLASLt); tunes on first use.
  bool choose_gemv(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor out);
  // ms per call of fn, over a few calls after two warm-ups (synchronizes).
  float time_ms(const std::function<void()>& fn);
  void copy_from_host_impl(Tensor dst, const void* src, DType src_dtype, int64_t n);

  int device_;
  DType dtype_;
  std::string name_;
  int num_sms_ = 0;
  int compute_capability_ = 0;  // major * 10 + minor
  cudaStream_t stream_ = nullptr;
  int attention_prefetch_max_seqs_ = 8;
  int attention_lean_ = 1;
  int64_t attention_lean_launches_ = 0;
  int attention_mma_min_seqs_ = 128;  // IB_ATTN_MMA
  int64_t attention_mma_launches_ = 0;
  int attention_mixed_min_seqs_ = 16;  // IB_ATTN_MIXED
  int64_t attention_mixed_launches_ = 0;
  int attention_mma_persist_ = 0;   // IB_ATTN_MMA_PERSIST
  int attention_mma_blocks_ = 0;    // its blocks (0: a block per item)
  bool attention_e4m3_f16_ = true;  // IB_ATTN_E4M3_F16
  MatmulObserver observer_;
  std::unique_ptr<GemmLt> gemm_;
  Buffer gemm_workspace_;
  Buffer gemm_prewarm_;       // IB_GEMM_M_BUCKETS' prewarm output, allocated when first turned on
  Buffer gemm_tune_scratch_;  // IB_GEMM_TUNE's operands, held during one shape's pass
  Buffer attention_workspace_;
  Buffer staging_;
  Buffer attention_counters_;
  Buffer sync_counters_;  // kSyncCounterBytes: the LoRA counters, then IB_QUANT_SYNC's sets
  Buffer lora_chain_;     // kLoraChainBytes
  Buffer quant_scratch_;
  Buffer dequant_scratch_;     // W8A16 / 4-bit above the GEMV's rows: the weight in the act dtype
  Buffer int32_scratch_;       // INT8 W8A8 above the GEMV's rows: cuBLASLt's int32 sums
  Buffer gguf_scratch_;        // kGguf: the GEMV's int8 x and block scales, or prefill's x' rows
  Buffer quant_gemm_scratch_;  // IB_QUANT_GEMM: kQuantGemmScratchBytes
  int gemv_max_m_ = 8;
  int fp8_gemv_max_m_ = 8;
  int64_t gemv_max_weight_bytes_ = int64_t{64} << 20;
  AttentionPath attention_path_ = AttentionPath::kAuto;
  bool add_with_cublaslt_ = false;
  bool debug_sync_ = false;
  bool capturing_ = false;
  std::string error_;  // the first device error; empty while all is well
  cudaEvent_t timer_begin_ = nullptr, timer_end_ = nullptr;
  bool timer_recorded_ = false;
  double copy_ceiling_bytes_per_s_ = 0.0;
  bool tuning_ = true;
  int gemv_rule_rows_ = 1;  // IB_MATMUL_TUNING=1 (2: 0, 3: kTuneMaxM)
  bool pdl_ = true;
  bool pdl_attention_trigger_early_ = false;
  bool pdl_attention_early_w8a8_ = true;  // IB_PDL=3 (the default)
  bool w8a8_weights_ = false;             // a W8A8 weight was readied (reserve_quant_scratch)
  bool fused_ = true;
  bool mla_ = true;                 // IB_CUDA_MLA
  bool mla_split_ = true;           // IB_MLA_SPLIT
  int64_t moe_wide_tokens_ = 1;     // IB_MOE_WIDE
  int64_t moe_tile_tokens_ = 2;     // IB_MOE_TILES
  int64_t moe_balance_tokens_ = 8;  // IB_MOE_BALANCE
  int64_t moe_warp_tokens_ = 8;     // IB_MOE_WARPS
  bool moe_warp_ring_ = false;      // IB_MOE_WARP_RING
  int64_t moe_gemm_tokens_ = 32;    // IB_MOE_GEMM
  int64_t moe_gemm_launches_ = 0;
  int64_t quant_gemm_rows_ = 64;      // IB_QUANT_GEMM
  bool quant_gemm_prepared_ = false;  // its kernels' shared memory allowed on device_
  int64_t quant_gemm_launches_ = 0;
  bool moe_shared_ = false;     // IB_MOE_SHARED
  bool moe_pdl_ = true;         // IB_MOE_PDL
  bool moe_int4_ring_ = false;  // IB_MOE_INT4_RING
  int moe_add_norm_ = 0;        // IB_MOE_ADD_NORM
  bool lora_fused_ = false;
  bool lora_pdl_ = true;
  int lora_in_gemv_ = 5;
  std::array<LoraChain, kLoraChains> lora_chains_{};
  bool lora_attn_ = false;  // IB_LORA_ATTN
  Buffer attn_lora_buf_;    // its u and partials (kGemvLoraChainFloats + kAttnLoraPartialFloats)
  AttnLoraPending attn_lora_pending_;
  int64_t attn_lora_launches_ = 0;
  int64_t lora_shrink_launches_ = 0;
  int64_t lora_sync_pairs_ = 0;           // IB_LORA_IN_GEMV=4's flagged pairs; their sets alternate
  mutable int64_t quant_sync_pairs_ = 0;  // IB_QUANT_SYNC's quantize / GEMV pairs, alike
  std::set<std::string> switches_from_env_;
  cudaEvent_t tune_begin_ = nullptr, tune_end_ = nullptr;
  // (m, n, k, in dtype, out dtype, bias) -> GEMV chosen.
  std::map<std::tuple<int64_t, int64_t, int64_t, int, int, bool>, bool> gemv_choice_;
};

}  // namespace ib::cuda
