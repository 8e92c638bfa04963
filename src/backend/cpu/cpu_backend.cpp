// CpuBackend: memory, transfers, initialisation and the element-wise ops; matmul, attention and
// sampling live in their own files (detail/kernels.h).
#include "backend/cpu/cpu_backend.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "backend/cpu/detail/dot.h"
#include "backend/cpu/detail/float_elements.h"
#include "backend/cpu/detail/host_info.h"
#include "backend/cpu/detail/kernels.h"
#include "core/rng.h"

namespace ib {
namespace {

constexpr size_t kHugePageBytes = size_t{2} << 20;

using cpu::is_float;
using cpu::load_as_f32;
using cpu::store_from_f32;

void check_f32(const Tensor& t, const char* what) {
  IB_ASSERT(t.dtype == DType::kF32 && t.data != nullptr, what);
}

// Rows per parallel chunk so that each chunk holds at least ~16K elements.
int64_t rows_per_chunk(int64_t row_size) {
  return std::max<int64_t>(1, 16384 / std::max<int64_t>(1, row_size));
}

}  // namespace

void cpu::rms_norm_row(const float* x, const float* weight, float eps, int64_t d, float* out) {
  const float mean_square = cpu::dot_f32(x, x, d) / static_cast<float>(d);
  const float inv_rms = 1.0f / std::sqrt(mean_square + eps);
  for (int64_t i = 0; i < d; ++i) out[i] = (x[i] * inv_rms) * weight[i];
}

CpuBackend::CpuBackend(int num_threads) : pool_(num_threads) {}

void CpuBackend::enable_fused_decode_reference() {
  if (!fused_reference_) fused_reference_ = std::make_unique<CpuFusedDecodeReference>(*this);
}

DeviceInfo CpuBackend::device_info() const {
  const cpu::HostMemory mem = cpu::read_host_memory();
  DeviceInfo info;
  info.name =
      "cpu: " + cpu::read_cpu_model_name() + " (" + std::to_string(pool_.size()) + " threads)";
  info.kind = "cpu";
  info.total_bytes = mem.total_bytes;
  info.free_bytes = mem.available_bytes;
  return info;
}

Result<void*> CpuBackend::raw_alloc(size_t bytes) {
  const cpu::HostMemory mem = cpu::read_host_memory();
  if (mem.available_bytes > 0 && static_cast<int64_t>(bytes) > mem.available_bytes) {
    return runtime_error("out of host memory: allocating " + std::to_string(bytes) +
                         " bytes, but only " + std::to_string(mem.available_bytes) +
                         " are available; use a smaller model, batch or KV cache");
  }
  // Large buffers (weights, KV cache, activations) start on a 2 MiB boundary and ask for
  // transparent huge pages: far fewer page faults and TLB misses when streaming gigabytes.
  const bool large = bytes >= kHugePageBytes;
  const size_t alignment = large ? kHugePageBytes : 256;
  const size_t size = (std::max<size_t>(bytes, 256) + alignment - 1) / alignment * alignment;
  void* ptr = std::aligned_alloc(alignment, size);
#if defined(__linux__)
  if (ptr != nullptr && large) madvise(ptr, size, MADV_HUGEPAGE);
#endif
  if (ptr == nullptr) {
    return runtime_error("out of host memory: allocating " + std::to_string(bytes) +
                         " bytes failed");
  }
  return ptr;
}

void CpuBackend::raw_free(void* ptr, size_t /*bytes*/) {
  std::free(ptr);
}

void CpuBackend::copy_from_host(Tensor dst, const void* src, DType src_dtype) {
  if (src_dtype == dst.dtype) {
    std::memcpy(dst.data, src, dst.bytes());
    return;
  }
  IB_ASSERT(is_float(src_dtype) && is_float(dst.dtype), "copy_from_host: unsupported conversion");
  const int64_t n = dst.numel();
  pool_.parallel_for(n, 1 << 16, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i)
      store_from_f32(dst.data, dst.dtype, i, load_as_f32(src, src_dtype, i));
  });
}

void CpuBackend::copy_to_host(const Tensor& src, void* dst) {
  std::memcpy(dst, src.data, src.bytes());
}

void CpuBackend::copy_on_device(Tensor dst, const Tensor& src) {
  IB_ASSERT(dst.dtype == src.dtype && dst.numel() == src.numel(),
            "copy_on_device: dst and src must have the same dtype and element count");
  if (dst.numel() > 0) std::memcpy(dst.data, src.data, src.bytes());
}

void CpuBackend::fill_uniform(Tensor dst, uint64_t seed, uint64_t stream, float scale) {
  IB_ASSERT(is_float(dst.dtype), "fill_uniform: floating-point tensor expected");
  pool_.parallel_for(dst.numel(), 1 << 16, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const float u = counter_uniform(seed, stream, static_cast<uint64_t>(i));
      store_from_f32(dst.data, dst.dtype, i, scale * (2.0f * u - 1.0f));
    }
  });
}

void CpuBackend::fill_constant(Tensor dst, float value) {
  IB_ASSERT(is_float(dst.dtype), "fill_constant: floating-point tensor expected");
  for (int64_t i = 0; i < dst.numel(); ++i) store_from_f32(dst.data, dst.dtype, i, value);
}

void CpuBackend::scale_columns(const WeightRef& weight, const Tensor& gain) {
  const Tensor& w = weight.dense();
  check_f32(w, "scale_columns: w must be fp32");
  check_f32(gain, "scale_columns: gain must be fp32");
  const int64_t k = w.row_size();
  IB_ASSERT(gain.numel() == k, "scale_columns: w (N, K), gain (K)");
  const float* g = gain.as<const float>();
  float* p = w.as<float>();
  for (int64_t i = 0; i < w.numel(); ++i) p[i] *= g[i % k];
}

void CpuBackend::embedding(const Tensor& token_ids, const Tensor& table, Tensor out) {
  check_f32(table, "embedding: table must be fp32");
  check_f32(out, "embedding: out must be fp32");
  IB_ASSERT(token_ids.dtype == DType::kI32, "embedding: token ids must be int32");
  const int64_t t = token_ids.numel();
  const int64_t d = table.dim(1);
  IB_ASSERT(out.rows() == t && out.row_size() == d, "embedding: out shape (T, D)");
  const auto* ids = token_ids.as<const int32_t>();
  for (int64_t i = 0; i < t; ++i) {
    IB_ASSERT(ids[i] >= 0 && ids[i] < table.dim(0), "embedding: token id outside the vocabulary");
    std::memcpy(out.as<float>() + i * d, table.as<const float>() + ids[i] * d,
                static_cast<size_t>(d) * sizeof(float));
  }
}

void CpuBackend::rms_norm(const Tensor& x, const Tensor& weight, float eps, Tensor out) {
  check_f32(x, "rms_norm: x must be fp32");
  const int64_t d = x.row_size();
  IB_ASSERT(weight.numel() == d && out.rows() == x.rows() && out.row_size() == d,
            "rms_norm: shapes x (T, D), weight (D), out (T, D)");
  pool_.parallel_for(x.rows(), rows_per_chunk(d), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      cpu::rms_norm_row(x.as<const float>() + r * d, weight.as<const float>(), eps, d,
                        out.as<float>() + r * d);
    }
  });
}

void CpuBackend::add_rms_norm(Tensor residual, const Tensor& x, const Tensor& weight, float eps,
                              Tensor out) {
  check_f32(residual, "add_rms_norm: residual must be fp32");
  const int64_t d = residual.row_size();
  IB_ASSERT(x.rows() == residual.rows() && x.row_size() == d && weight.numel() == d &&
                out.rows() == residual.rows() && out.row_size() == d,
            "add_rms_norm: shapes residual (T, D), x (T, D), weight (D), out (T, D)");
  pool_.parallel_for(residual.rows(), rows_per_chunk(d), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      float* res = residual.as<float>() + r * d;
      const float* xr = x.as<const float>() + r * d;
      for (int64_t i = 0; i < d; ++i) res[i] += xr[i];
      cpu::rms_norm_row(res, weight.as<const float>(), eps, d, out.as<float>() + r * d);
    }
  });
}

void CpuBackend::matmul(const Tensor& x, const WeightRef& weight, const Tensor* bias, Tensor out) {
  const Tensor& w = weight.data;
  check_f32(x, "matmul: x must be fp32");
  check_f32(out, "matmul: out must be fp32");
  const int64_t m = x.rows();
  const int64_t k = x.row_size();
  const int64_t n = w.rows();
  IB_ASSERT(weight.cols() == k, "matmul: w (N, K) must match x (M, K)");
  IB_ASSERT(out.rows() == m && out.row_size() == n, "matmul: out must be (M, N)");
  if (observer_) observer_(x, weight);
  const float* b = nullptr;
  if (bias != nullptr && !bias->empty()) {
    check_f32(*bias, "matmul: bias must be fp32");
    IB_ASSERT(bias->numel() == n, "matmul: bias must be (N)");
    b = bias->as<const float>();
  }
  switch (weight.format) {
    case WeightFormat::kDense:
      check_f32(w, "matmul: w must be fp32");
      cpu::matmul_f32(pool_, x.as<const float>(), w.as<const float>(), b, out.as<float>(), m, n, k);
      return;
    case WeightFormat::kFp8E4M3:
    case WeightFormat::kInt8W8A16:
    case WeightFormat::kInt8W8A8:
      break;
    case WeightFormat::kInt4W4A16:
    case WeightFormat::kNf4:
      IB_ASSERT(weight.quantized_layout_ok(), "matmul: a 4-bit weight's layout (weight.h)");
      cpu::matmul_4bit(pool_, x.as<const float>(), weight, b, out.as<float>(), m);
      return;
    case WeightFormat::kGguf:
      IB_ASSERT(weight.quantized_layout_ok(), "matmul: a GGUF weight's layout (weight.h)");
      cpu::matmul_gguf(pool_, x.as<const float>(), weight, b, out.as<float>(), m);
      return;
  }
  IB_ASSERT(weight.quantized_layout_ok(),
            "matmul: a quantized weight is data (N, K) of its format's dtype (fp8_e4m3 or int8) "
            "with scales f32 (N)");
  const float* scales = weight.scales.as<const float>();
  if (weight.format == WeightFormat::kFp8E4M3) {
    cpu::matmul_fp8(pool_, x.as<const float>(), w.as<const uint8_t>(), scales, b, out.as<float>(),
                    m, n, k, weight.input_scale);
  } else if (weight.format == WeightFormat::kInt8W8A16) {
    cpu::matmul_int8_w8a16(pool_, x.as<const float>(), w.as<const int8_t>(), scales, b,
                           out.as<float>(), m, n, k);
  } else {
    const cpu::StaticInt8Activations fixed{weight.input_scale, weight.input_zero_point,
                                           weight.input_asymmetric};
    cpu::matmul_int8_w8a8(pool_, x.as<const float>(), w.as<const int8_t>(), scales, b,
                          out.as<float>(), m, n, k, &fixed);
  }
}

void CpuBackend::quantize_weight(const Tensor& dense, const WeightRef& out) {
  check_f32(dense, "quantize_weight: dense must be fp32");
  const int64_t n = dense.rows();
  const int64_t k = dense.row_size();
  IB_ASSERT(out.quantized_layout_ok() && out.rows() == n && out.cols() == k,
            "quantize_weight: out must be a quantized format's layout (weight.h) for dense (N, K)");
  IB_ASSERT(out.format != WeightFormat::kGguf, "quantize_weight: GGUF weights arrive quantized");
  if (is_4bit(out.format)) {
    cpu::quantize_4bit(pool_, dense.as<const float>(), out);
  } else if (out.format == WeightFormat::kFp8E4M3) {
    cpu::quantize_rows_fp8(pool_, dense.as<const float>(), n, k, out.data.as<uint8_t>(),
                           out.scales.as<float>());
  } else {
    cpu::quantize_rows_int8(pool_, dense.as<const float>(), n, k, out.data.as<int8_t>(),
                            out.scales.as<float>());
  }
}

void CpuBackend::weight_row_sums(const WeightRef& w, Tensor out) {
  IB_ASSERT(w.quantized_layout_ok() && w.data.dtype == DType::kI8 && out.dtype == DType::kI32 &&
                out.numel() == w.data.rows(),
            "weight_row_sums: an int8 weight (N, K) and out (N) int32");
  const int64_t k = w.data.row_size();
  const int8_t* data = w.data.as<const int8_t>();
  int32_t* sums = out.as<int32_t>();
  pool_.parallel_for(w.data.rows(), 64, [&](int64_t begin, int64_t end) {
    for (int64_t n = begin; n < end; ++n) {
      int32_t sum = 0;
      for (int64_t i = 0; i < k; ++i) sum += data[n * k + i];
      sums[n] = sum;
    }
  });
}

void CpuBackend::rope_and_cache(Tensor qkv, const Tensor& positions, const Tensor& slot_mapping,
                                const Tensor& inv_freq, const KvCacheLayer& kv,
                                const AttentionShape& shape) {
  check_f32(qkv, "rope_and_cache: qkv must be fp32");
  IB_ASSERT((kv.k.dtype == DType::kF32 || kv.k.dtype == DType::kF8E4M3) &&
                kv.v.dtype == kv.k.dtype && kv.k_scale > 0.0f && kv.v_scale > 0.0f,
            "rope_and_cache: cache must be fp32 or fp8_e4m3 (positive scales)");
  check_f32(inv_freq, "rope_and_cache: inv_freq must be fp32");
  const int64_t t = qkv.rows();
  IB_ASSERT(qkv.row_size() == int64_t{shape.num_heads + 2 * shape.num_kv_heads} * shape.head_dim,
            "rope_and_cache: qkv row must be (Hq + 2 Hkv) * head_dim");
  IB_ASSERT(positions.numel() == t && slot_mapping.numel() == t && positions.dtype == DType::kI32 &&
                slot_mapping.dtype == DType::kI32,
            "rope_and_cache: positions and slot_mapping must be int32 (T)");
  IB_ASSERT(inv_freq.numel() == shape.head_dim / 2,
            "rope_and_cache: inv_freq must be (head_dim / 2)");
  IB_ASSERT(kv.k.rank == 4 && kv.k.dim(1) == shape.num_kv_heads && kv.k.dim(2) == kv.block_size &&
                kv.k.dim(3) == shape.head_dim && kv.v.shape == kv.k.shape,
            "rope_and_cache: cache must be (blocks, Hkv, block_size, head_dim)");
  cpu::rope_and_cache_f32(pool_, qkv.as<float>(), positions.as<const int32_t>(),
                          slot_mapping.as<const int32_t>(), inv_freq.as<const float>(), t, kv,
                          shape);
}

void CpuBackend::attention(const Tensor& qkv, const KvCacheLayer& kv, const AttentionMetadata& meta,
                           const AttentionShape& shape, Tensor out) {
  check_f32(qkv, "attention: qkv must be fp32");
  check_f32(out, "attention: out must be fp32");
  IB_ASSERT(shape.num_kv_heads > 0 && shape.num_heads % shape.num_kv_heads == 0,
            "attention: num_heads must be a multiple of num_kv_heads");
  IB_ASSERT(meta.query_start.dtype == DType::kI32 && meta.context_lens.dtype == DType::kI32 &&
                meta.block_tables.dtype == DType::kI32 && meta.block_tables.rank == 2,
            "attention: metadata must be int32; block_tables (num_seqs, max_blocks)");
  IB_ASSERT(meta.query_start.numel() >= meta.num_seqs + 1 &&
                meta.context_lens.numel() >= meta.num_seqs &&
                meta.block_tables.dim(0) >= meta.num_seqs,
            "attention: metadata shorter than num_seqs");
  const auto* query_start = meta.query_start.as<const int32_t>();
  IB_ASSERT(query_start[0] == 0 && query_start[meta.num_seqs] == qkv.rows(),
            "attention: query_start must cover the T tokens of qkv");
  IB_ASSERT(out.rows() == qkv.rows() && out.row_size() == int64_t{shape.num_heads} * shape.head_dim,
            "attention: out must be (T, Hq * head_dim)");
  // The decode-prefix hint the CUDA backend acts on (IB_ATTN_MIXED), checked where it is cheap.
  IB_ASSERT(meta.decode_prefix >= 0 && meta.decode_prefix <= meta.num_seqs,
            "attention: decode_prefix must lie in [0, num_seqs]");
  for (int i = 0; i < meta.decode_prefix; ++i) {
    IB_ASSERT(query_start[i + 1] == i + 1,
              "attention: the decode_prefix hint names a sequence of more than one query token");
  }
  cpu::AttentionHostMeta host{meta.num_seqs, query_start, meta.context_lens.as<const int32_t>(),
                              meta.block_tables.as<const int32_t>(), meta.block_tables.dim(1)};
  cpu::paged_attention_f32(pool_, qkv.as<const float>(), kv, host, shape, out.as<float>());
}

void CpuBackend::silu_mul(const Tensor& gate_up, Tensor out) {
  check_f32(gate_up, "silu_mul: gate_up must be fp32");
  const int64_t f = out.row_size();
  IB_ASSERT(gate_up.row_size() == 2 * f && gate_up.rows() == out.rows(),
            "silu_mul: gate_up (T, 2F), out (T, F)");
  pool_.parallel_for(out.rows(), rows_per_chunk(f), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* g = gate_up.as<const float>() + r * 2 * f;
      const float* u = g + f;
      float* o = out.as<float>() + r * f;
      for (int64_t i = 0; i < f; ++i) o[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
    }
  });
}

void CpuBackend::gather_rows(const Tensor& x, const Tensor& row_ids, Tensor out) {
  IB_ASSERT(row_ids.dtype == DType::kI32 && x.dtype == out.dtype,
            "gather_rows: int32 ids, same dtypes");
  const int64_t r = row_ids.numel();
  const size_t row_bytes = static_cast<size_t>(x.row_size()) * dtype_size(x.dtype);
  IB_ASSERT(out.rows() == r && out.row_size() == x.row_size(), "gather_rows: out must be (R, D)");
  const auto* ids = row_ids.as<const int32_t>();
  for (int64_t i = 0; i < r; ++i) {
    IB_ASSERT(ids[i] >= 0 && ids[i] < x.rows(), "gather_rows: row id out of range");
    std::memcpy(static_cast<char*>(out.data) + static_cast<size_t>(i) * row_bytes,
                static_cast<const char*>(x.data) + static_cast<size_t>(ids[i]) * row_bytes,
                row_bytes);
  }
}

void CpuBackend::sample(const Tensor& logits, const SamplingMetadata& meta, Tensor out_tokens) {
  check_f32(logits, "sample: logits must be fp32");
  IB_ASSERT(out_tokens.dtype == DType::kI32 && out_tokens.numel() >= meta.num_rows &&
                logits.rows() >= meta.num_rows,
            "sample: logits (R, V) f32 and out_tokens int32 (R)");
  const int64_t vocab = logits.row_size();
  pool_.parallel_for(meta.num_rows, 1, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      cpu::SampleParams p;
      p.temperature = meta.temperature.as<const float>()[r];
      p.top_k = meta.top_k.as<const int32_t>()[r];
      p.top_p = meta.top_p.as<const float>()[r];
      p.seed = static_cast<uint64_t>(meta.seed.as<const int64_t>()[r]);
      p.step = meta.step.as<const int32_t>()[r];
      out_tokens.as<int32_t>()[r] = cpu::sample_row(logits.as<const float>() + r * vocab, vocab, p);
    }
  });
}

}  // namespace ib
