// Backend: device memory through one tracked allocator, and the ops a Llama-family forward pass
// needs. The CPU backend (cpu/) is the reference every other backend is tested against.
//
// Contract:
//  - Ops are enqueued in call order on the backend's single stream; the CPU backend runs them
//    synchronously. Results are visible on the host only after synchronize() (or copy_to_host,
//    which synchronizes).
//  - Tensors passed to ops live in this backend's memory (alloc()); shapes are checked with
//    IB_ASSERT. "act" below means the backend's activation dtype (activation_dtype()): fp32 on
//    the CPU, the model dtype (bf16/fp16/fp32) on CUDA. Accumulation is always fp32.
//  - One thread drives a backend at a time (the engine's thread).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "backend/kernel_switches.h"
#include "backend/memory_tracker.h"
#include "backend/tensor.h"
#include "core/result.h"

namespace ib {

class Backend;

// A recorded sequence of ops (a CUDA graph), replayed with the arguments it was captured with:
// callers change what the ops read by writing into the same buffers before replay(). The memory
// its instantiation took is tracked under MemoryTag::kGraph for as long as it lives. It must not
// outlive its backend.
class DeviceGraph {
 public:
  virtual ~DeviceGraph() = default;
  virtual void replay() = 0;
  virtual int64_t bytes() const = 0;  // device memory its instantiation took
};

// An owning handle to one allocation; frees it through its backend when destroyed.
class Buffer {
 public:
  Buffer() = default;
  Buffer(Backend* backend, void* ptr, size_t bytes, MemoryTag tag)
      : backend_(backend), ptr_(ptr), bytes_(bytes), tag_(tag) {}
  ~Buffer() { reset(); }
  Buffer(Buffer&& o) noexcept { *this = std::move(o); }
  Buffer& operator=(Buffer&& o) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void reset();
  void* data() const { return ptr_; }
  size_t bytes() const { return bytes_; }
  MemoryTag tag() const { return tag_; }
  // A tensor view at byte offset within this buffer.
  Tensor view(DType dtype, std::initializer_list<int64_t> shape, size_t offset_bytes = 0) const;

 private:
  Backend* backend_ = nullptr;
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
  MemoryTag tag_ = MemoryTag::kOther;
};

struct DeviceInfo {
  std::string name;         // "cpu: AMD EPYC ..." or "NVIDIA H200"
  std::string kind;         // "cpu" or "cuda"
  int index = 0;            // device ordinal
  int64_t total_bytes = 0;  // device memory (host RAM for the CPU backend)
  int64_t free_bytes = 0;
};

// Per-layer view of the paged KV cache.
// Layout of k and v: (num_blocks, num_kv_heads, block_size, head_dim), dtype = act.
// A token at slot s lives in block s / block_size at offset s % block_size.
struct KvCacheLayer {
  Tensor k;
  Tensor v;
  int block_size = 16;
};

struct AttentionShape {
  int num_heads = 0;     // query heads
  int num_kv_heads = 0;  // key/value heads (GQA: num_heads % num_kv_heads == 0)
  int head_dim = 0;
  float scale = 0;         // softmax scale, usually 1/sqrt(head_dim)
  int sliding_window = 0;  // 0: full causal attention; w > 0: key positions > q_pos - w only
};

// The batch the attention op sees. Sequences are packed: sequence i owns query tokens
// [query_start[i], query_start[i+1]) of the flattened batch; after this step its cache holds
// context_lens[i] tokens, the last (query_start[i+1] - query_start[i]) of them being this
// step's tokens. Query token j of sequence i therefore sits at absolute position
// context_lens[i] - q_len_i + j and attends causally to positions <= its own.
struct AttentionMetadata {
  int num_seqs = 0;
  int num_tokens = 0;
  Tensor query_start;     // int32 (num_seqs + 1)
  Tensor context_lens;    // int32 (num_seqs)
  Tensor block_tables;    // int32 (num_seqs, max_blocks_per_seq); unused entries may be -1
  int max_query_len = 0;  // host-side hints for kernel choice
  int max_context_len = 0;
};

// Per-row sampling parameters, in backend memory.
// temperature <= 0 means greedy (argmax, lowest index on ties). Otherwise: scale by
// 1/temperature, keep the top_k largest logits (top_k <= 0: all), softmax, keep the smallest
// set of most probable tokens whose mass reaches top_p, renormalise, and draw with the uniform
// u = counter_uniform(seed, 0, step) by inverse CDF over tokens in descending probability.
// Precisely (the CPU reference, cpu/sampling.cpp): candidates are ordered by descending scaled
// logit (logit / temperature), ties by ascending token id; the nucleus is the shortest prefix
// whose cumulative mass reaches top_p * total; the draw is the first candidate whose cumulative
// mass exceeds u * (nucleus mass).
struct SamplingMetadata {
  int num_rows = 0;
  bool all_greedy = true;  // host-side hint: skip the stochastic path
  Tensor temperature;      // f32 (num_rows)
  Tensor top_k;            // int32 (num_rows)
  Tensor top_p;            // f32 (num_rows)
  Tensor seed;             // int64 (num_rows)
  Tensor step;             // int32 (num_rows): index of the token being sampled
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual DeviceInfo device_info() const = 0;
  virtual DType activation_dtype() const = 0;
  MemoryTracker& memory() { return memory_; }
  const MemoryTracker& memory() const { return memory_; }

  // Allocates bytes (256-byte aligned). Fails, without aborting, when the device is out of
  // memory or the tracker's cap would be exceeded.
  Result<Buffer> alloc(size_t bytes, MemoryTag tag);
  // The bytes alloc(bytes, ...) takes and the tracker counts: bytes rounded up to 256.
  static constexpr size_t alloc_bytes(size_t bytes) { return (bytes + 255) / 256 * 256; }
  // The error alloc() returns when the tracker's cap refuses bytes (rounded) for tag; callers
  // that refuse early (MemoryTracker::admit_after_free) return the same message.
  Error cap_refusal(size_t bytes, MemoryTag tag) const;

  // ---- transfers ----
  // dst <- host bytes of src_dtype, converting element type to dst.dtype (f32/bf16/f16).
  virtual void copy_from_host(Tensor dst, const void* src, DType src_dtype) = 0;
  // host <- src bytes, no conversion; synchronizes.
  virtual void copy_to_host(const Tensor& src, void* dst) = 0;
  // dst <- src, both in this backend's memory, same dtype and element count, no conversion
  // (device to device, enqueued on the stream; the CPU backend copies at once).
  virtual void copy_on_device(Tensor dst, const Tensor& src) = 0;
  virtual void synchronize() = 0;

  // ---- initialisation ----
  // dst[i] = scale * (2 * counter_uniform(seed, stream, i) - 1), rounded to dst.dtype.
  virtual void fill_uniform(Tensor dst, uint64_t seed, uint64_t stream, float scale) = 0;
  virtual void fill_constant(Tensor dst, float value) = 0;

  // ---- forward-pass ops ----
  // out (T, D) act = table[token_ids[t]]; table (V, D) act; token_ids int32 (T).
  virtual void embedding(const Tensor& token_ids, const Tensor& table, Tensor out) = 0;
  // out (T, D) = x / rms(x) * weight; x (T, D) act, weight (D) act.
  virtual void rms_norm(const Tensor& x, const Tensor& weight, float eps, Tensor out) = 0;
  // residual += x (in place, act); out = rms_norm(residual) * weight.
  virtual void add_rms_norm(Tensor residual, const Tensor& x, const Tensor& weight, float eps,
                            Tensor out) = 0;
  // out (M, N) = x (M, K) @ w (N, K)^T (+ bias (N)); fp32 accumulation.
  // out may be f32 while x and w are act (used for logits).
  virtual void matmul(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor out) = 0;
  // qkv (T, (Hq + 2 Hkv) * head_dim): rotates q and k in place with rotate-half RoPE at
  // positions (int32 T) using inv_freq (f32, head_dim / 2): angle = float(pos) * inv_freq[i];
  // then writes k and v into the cache at slot_mapping (int32 T; -1 skips the token).
  virtual void rope_and_cache(Tensor qkv, const Tensor& positions, const Tensor& slot_mapping,
                              const Tensor& inv_freq, const KvCacheLayer& kv,
                              const AttentionShape& shape) = 0;
  // out (T, Hq * head_dim) = softmax(q k^T * scale + causal/sliding mask) v over the paged
  // cache, for every query token of qkv (only its q part is read).
  virtual void attention(const Tensor& qkv, const KvCacheLayer& kv, const AttentionMetadata& meta,
                         const AttentionShape& shape, Tensor out) = 0;
  // out (T, F) = silu(gate_up[:, :F]) * gate_up[:, F:]; gate_up (T, 2F).
  virtual void silu_mul(const Tensor& gate_up, Tensor out) = 0;
  // out (R, D) = x[row_ids[r]]; row_ids int32 (R).
  virtual void gather_rows(const Tensor& x, const Tensor& row_ids, Tensor out) = 0;
  // out_tokens int32 (R) from logits f32 (R, V), as SamplingMetadata describes.
  virtual void sample(const Tensor& logits, const SamplingMetadata& meta, Tensor out_tokens) = 0;

  // ---- optional: fused decode ops (CUDA; bench/NOTES.md, phase 3) ----
  // Whether the fused ops below exist for a model of these shapes (hidden size D, intermediate
  // size F, the attention heads), and whether they run a step of num_tokens rows. They expect each
  // RMSNorm's gain folded into the columns of the matmul after it (scale_columns, the gain then set
  // to ones), so that rms_norm(h) * g @ w^T = rms_norm(h) @ (w * g)^T; the CPU backend, which has
  // none of them, is their oracle through the unfused ops.
  virtual bool fused_decode_fits(const AttentionShape& /*shape*/, int64_t /*hidden_size*/,
                                 int64_t /*intermediate_size*/) const {
    return false;
  }
  virtual bool fused_decode(int64_t /*num_tokens*/) const { return false; }
  // qkv = rms_norm(h) @ w^T (+ bias (N)), h (M, K) un-normalised and no gain, then
  // rope_and_cache(qkv, ...) as below, in one op.
  virtual void rms_matmul_rope_cache(const Tensor& h, const Tensor& w, const Tensor* bias,
                                     float eps, const Tensor& positions, const Tensor& slot_mapping,
                                     const Tensor& inv_freq, const KvCacheLayer& kv,
                                     const AttentionShape& shape, Tensor qkv);
  // out (M, F) = silu(g) * u where [g | u] = rms_norm(h) @ w^T; w (2F, K).
  virtual void rms_matmul_swiglu(const Tensor& h, const Tensor& w, float eps, Tensor out);
  // residual (M, N) += x (M, K) @ w (N, K)^T, fp32 accumulation, rounded once.
  virtual void matmul_add(const Tensor& x, const Tensor& w, Tensor residual);
  // w (N, K): w[n][k] *= gain[k] (gain (K), w's dtype), rounded once.
  virtual void scale_columns(Tensor w, const Tensor& gain) = 0;

  // ---- optional: graphs, device timing, error state (the CPU backend has none of them) ----
  // Ops enqueued between begin_capture() and end_capture() are recorded into a DeviceGraph
  // instead of running. Ops must not synchronize, allocate or copy from the host meanwhile.
  virtual bool supports_graphs() const { return false; }
  virtual Status begin_capture() { return runtime_error("this backend has no graphs"); }
  virtual Result<std::unique_ptr<DeviceGraph>> end_capture() {
    return runtime_error("this backend has no graphs");
  }
  // Device time of the work enqueued between timer_start() and timer_stop(); read it after the
  // next synchronize() or copy_to_host(). nullopt when the backend cannot time its device.
  virtual void timer_start() {}
  virtual void timer_stop() {}
  virtual std::optional<int64_t> timer_elapsed_ns() { return std::nullopt; }
  // Bytes per second (read + written) of a large device-to-device copy, measured once when the
  // backend started; 0 when not measured (CPU).
  virtual double copy_ceiling_bytes_per_s() const { return 0.0; }
  // The first device error since the backend started (a failed kernel launch or an asynchronous
  // fault seen at a synchronization), naming the op; once set, later ops are skipped. Ok while
  // every op succeeded.
  virtual Status device_status() const { return Ok{}; }
  // Whether the attention op runs this shape here (CUDA kernels cover head_dim 64, 96, 128);
  // a user error naming the limit otherwise, checked before any weight is loaded.
  virtual Status supports_attention(const AttentionShape& /*shape*/) const { return Ok{}; }

  // ---- kernel switches (kernel_switches.h), for result.json ----
  // The effective setting of every switch this backend read, whether from the environment or its
  // default. A backend that reads none (the CPU backend) reports the known switches the
  // environment sets, each marked as not applying.
  virtual KernelSwitches kernel_switches() const { return unapplied_kernel_switches(); }

 protected:
  virtual Result<void*> raw_alloc(size_t bytes) = 0;
  virtual void raw_free(void* ptr, size_t bytes) = 0;

 private:
  friend class Buffer;
  void release(void* ptr, size_t bytes, MemoryTag tag);
  MemoryTracker memory_;
};

// Options for creating a backend from the command line.
struct BackendOptions {
  std::string device = "cpu";  // "cpu", "cuda", "cuda:N"
  DType dtype = DType::kF32;   // model/activation dtype (CPU: fp32 only)
  int num_threads = 0;         // CPU: 0 = all hardware threads
  std::optional<int64_t> memory_limit_bytes;
};

// Creates the backend named by options.device; user errors for an unknown device, a CUDA
// device in a build without CUDA, a bad index, or a dtype the backend cannot run.
Result<std::unique_ptr<Backend>> create_backend(const BackendOptions& options);
bool cuda_backend_compiled();

}  // namespace ib
