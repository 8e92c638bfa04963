// Test support for the differential GPU tests: the same inputs in the CPU reference backend (fp32)
// and the CUDA backend (at the dtype under test, values rounded to it first), outputs poisoned
// with NaN before every op, results read back as floats, and the relative L2 error.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/backend_factory.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/detail/cuda_backend_impl.h"
#include "core/rng.h"

// Skips a GPU test with a visible message where the machine has no CUDA device.
#define IB_REQUIRE_CUDA()                                                                   \
  do {                                                                                      \
    if (::ib::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device: GPU test skipped"; \
  } while (0)

namespace ib::cuda::testing {

// Relative L2 error ||got - want|| / ||want||; infinity when got holds a NaN (unwritten output).
inline double rel_l2(const std::vector<float>& got, const std::vector<float>& want) {
  IB_ASSERT(got.size() == want.size(), "rel_l2: size mismatch");
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    const double d = double{got[i]} - double{want[i]};
    num += d * d;
    den += double{want[i]} * double{want[i]};
  }
  return den == 0 ? std::sqrt(num) : std::sqrt(num / den);
}

// The stated tolerance on relative L2 error per activation dtype.
inline double tolerance(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return 2e-5;
    case DType::kF16:
      return 3e-3;
    default:
      return 1e-2;
  }
}

inline float round_to(DType dtype, float v) {
  switch (dtype) {
    case DType::kBF16:
      return round_to_bf16(v);
    case DType::kF16:
      return f16_bits_to_f32(f32_to_f16_bits(v));
    default:
      return v;
  }
}

inline std::vector<float> random_floats(Rng& rng, int64_t n, float lo = -1.0f, float hi = 1.0f) {
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = lo + (hi - lo) * static_cast<float>(rng.uniform());
  return v;
}

// Paired tensors: .cpu in the reference backend (f32 for floats), .gpu in the CUDA backend.
struct Pair {
  Tensor cpu;
  Tensor gpu;
};

class Twin {
 public:
  explicit Twin(DType dtype) : dtype_(dtype) {
    auto cpu = create_backend(BackendOptions{"cpu", DType::kF32, 0, std::nullopt});
    IB_ASSERT(cpu.ok(), "CPU backend");
    cpu_ = std::move(cpu).value();
    auto gpu = CudaBackend::create(0, dtype, std::nullopt);
    IB_ASSERT(gpu.ok(), "CUDA backend");
    gpu_ = std::move(gpu).value();
    gpu_->set_debug_sync(true);
  }
  DType dtype() const { return dtype_; }
  Backend& cpu() { return *cpu_; }
  CudaBackend& gpu() { return *gpu_; }

  // Values as the GPU dtype holds them.
  std::vector<float> representable(std::vector<float> v) const {
    for (auto& x : v) x = round_to(dtype_, x);
    return v;
  }
  // A float tensor holding `values` (rounded to the dtype) on both sides; gpu_dtype overrides
  // the GPU element type (e.g. f32 logits).
  Pair floats(std::initializer_list<int64_t> shape, const std::vector<float>& values,
              std::optional<DType> gpu_dtype = std::nullopt) {
    const DType gd = gpu_dtype.value_or(dtype_);
    Pair p{make(*cpu_, DType::kF32, shape), make(*gpu_, gd, shape)};
    IB_ASSERT(static_cast<int64_t>(values.size()) == p.cpu.numel(), "value count != shape");
    std::vector<float> rounded = values;
    for (auto& x : rounded) x = round_to(gd, x);
    cpu_->copy_from_host(p.cpu, rounded.data(), DType::kF32);
    gpu_->copy_from_host(p.gpu, rounded.data(), DType::kF32);
    return p;
  }
  template <typename I>
  Pair ints(std::initializer_list<int64_t> shape, const std::vector<I>& values) {
    const DType d = sizeof(I) == 8 ? DType::kI64 : DType::kI32;
    Pair p{make(*cpu_, d, shape), make(*gpu_, d, shape)};
    IB_ASSERT(static_cast<int64_t>(values.size()) == p.cpu.numel(), "value count != shape");
    cpu_->copy_from_host(p.cpu, values.data(), d);
    gpu_->copy_from_host(p.gpu, values.data(), d);
    return p;
  }
  // An output poisoned with NaN on both sides.
  Pair output(std::initializer_list<int64_t> shape, std::optional<DType> gpu_dtype = std::nullopt) {
    Pair p{make(*cpu_, DType::kF32, shape), make(*gpu_, gpu_dtype.value_or(dtype_), shape)};
    cpu_->fill_constant(p.cpu, NAN);
    gpu_->fill_constant(p.gpu, NAN);
    return p;
  }
  // The same bytes of a one-byte dtype (fp8_e4m3) on both sides.
  Pair bytes(DType dtype, std::initializer_list<int64_t> shape, const std::vector<uint8_t>& v) {
    Pair p{make(*cpu_, dtype, shape), make(*gpu_, dtype, shape)};
    IB_ASSERT(dtype_size(dtype) == 1 && static_cast<int64_t>(v.size()) == p.cpu.numel(),
              "bytes: a one-byte dtype and one value per element");
    cpu_->copy_from_host(p.cpu, v.data(), dtype);
    gpu_->copy_from_host(p.gpu, v.data(), dtype);
    return p;
  }
  // Uninitialised tensors of one dtype on both sides (e.g. fp8 weights an op fills).
  Pair empty(DType dtype, std::initializer_list<int64_t> shape) {
    return Pair{make(*cpu_, dtype, shape), make(*gpu_, dtype, shape)};
  }
  Pair output_i32(std::initializer_list<int64_t> shape) {
    Pair p{make(*cpu_, DType::kI32, shape), make(*gpu_, DType::kI32, shape)};
    const std::vector<int32_t> poison(static_cast<size_t>(p.cpu.numel()), -7);
    cpu_->copy_from_host(p.cpu, poison.data(), DType::kI32);
    gpu_->copy_from_host(p.gpu, poison.data(), DType::kI32);
    return p;
  }

  std::vector<float> cpu_floats(const Tensor& t) { return to_floats(*cpu_, t); }
  std::vector<float> gpu_floats(const Tensor& t) { return to_floats(*gpu_, t); }
  template <typename I>
  std::vector<I> host_ints(Backend& b, const Tensor& t) {
    std::vector<I> out(static_cast<size_t>(t.numel()));
    b.copy_to_host(t, out.data());
    return out;
  }
  // Relative L2 error of the GPU result against the CPU result; the largest one a test saw is
  // recorded as the test property max_rel_l2 (gpu_tests.json).
  double error(const Pair& p) {
    const double e = rel_l2(gpu_floats(p.gpu), cpu_floats(p.cpu));
    max_error_ = std::max(max_error_, e);
    return e;
  }
  ~Twin() {
    if (max_error_ >= 0) ::testing::Test::RecordProperty("max_rel_l2", std::to_string(max_error_));
  }
  Twin(const Twin&) = delete;
  Twin& operator=(const Twin&) = delete;

 private:
  Tensor make(Backend& b, DType d, std::initializer_list<int64_t> shape) {
    Tensor probe(nullptr, d, shape);
    auto buf = b.alloc(std::max<size_t>(probe.bytes(), 1), MemoryTag::kOther);
    IB_ASSERT(buf.ok(), "test allocation failed");
    buffers_.push_back(std::move(buf).value());
    return buffers_.back().view(d, shape);
  }
  static std::vector<float> to_floats(Backend& b, const Tensor& t) {
    std::vector<float> out(static_cast<size_t>(t.numel()));
    if (t.dtype == DType::kF32) {
      b.copy_to_host(t, out.data());
      return out;
    }
    std::vector<uint16_t> bits(out.size());
    b.copy_to_host(t, bits.data());
    for (size_t i = 0; i < out.size(); ++i)
      out[i] = t.dtype == DType::kBF16 ? bf16_bits_to_f32(bits[i]) : f16_bits_to_f32(bits[i]);
    return out;
  }

  DType dtype_;
  double max_error_ = -1;
  std::unique_ptr<Backend> cpu_;
  std::unique_ptr<CudaBackend> gpu_;
  std::vector<Buffer> buffers_;  // declared last: freed before the backends
};

// Random E4M3 bytes of a KV cache with this scale: e4m3(u / scale), u uniform in [lo, hi).
inline std::vector<uint8_t> random_e4m3(Rng& rng, int64_t n, float scale, float lo = -2.0f,
                                        float hi = 2.0f) {
  std::vector<uint8_t> out(static_cast<size_t>(n));
  for (auto& b : out) {
    b = f32_to_f8e4m3_bits((lo + (hi - lo) * static_cast<float>(rng.uniform())) / scale);
  }
  return out;
}

// An E4M3 cache read back as backend/ops.h defines it: float(stored) * scale.
inline std::vector<float> read_e4m3(const std::vector<uint8_t>& bytes, float scale) {
  std::vector<float> out(bytes.size());
  for (size_t i = 0; i < bytes.size(); ++i) out[i] = f8e4m3_bits_to_f32(bytes[i]) * scale;
  return out;
}

// The stated tolerance (relative L2) between the GPU's and the CPU's E4M3 caches, read back:
// where act's rounding of a k or v value (bf16, fp16) crossed an E4M3 rounding boundary the two
// stored values are one E4M3 step apart (at most 12.5 % of the value); exact otherwise.
inline constexpr double kE4m3CacheTolerance = 5e-2;

// After an op wrote the E4M3 cache `cache` (K when !is_v) from the rows of qkv at `slots`
// (-1: none), with `before` the bytes it held: every written GPU element is exactly e4m3(x /
// scale) of the GPU's own qkv value x (the format's definition, bit for bit), every other byte
// is unchanged, and the GPU cache read back is within kE4m3CacheTolerance of the CPU's.
inline void expect_e4m3_cache_written(Twin& twin, const Pair& cache, const Pair& qkv,
                                      const std::vector<uint8_t>& before,
                                      const std::vector<int32_t>& slots, const AttentionShape& s,
                                      int block_size, bool is_v, float scale) {
  const auto gpu = twin.host_ints<uint8_t>(twin.gpu(), cache.gpu);
  const auto cpu = twin.host_ints<uint8_t>(twin.cpu(), cache.cpu);
  const std::vector<float> q = twin.gpu_floats(qkv.gpu);
  const int64_t hd = s.head_dim, hkv = s.num_kv_heads;
  const int64_t row = int64_t{s.num_heads + 2 * s.num_kv_heads} * hd;
  std::vector<bool> written(gpu.size(), false);
  for (size_t t = 0; t < slots.size(); ++t) {
    const int32_t slot = slots[t];
    if (slot < 0) continue;
    for (int64_t g = 0; g < hkv; ++g) {
      for (int64_t d = 0; d < hd; ++d) {
        const auto c = static_cast<size_t>(
            ((slot / block_size * hkv + g) * block_size + slot % block_size) * hd + d);
        const float x = q[static_cast<size_t>(static_cast<int64_t>(t) * row +
                                              (s.num_heads + (is_v ? hkv : 0) + g) * hd + d)];
        written[c] = true;
        ASSERT_EQ(gpu[c], f32_to_f8e4m3_bits(x / scale))
            << (is_v ? "v" : "k") << " token " << t << " head " << g << " dim " << d;
      }
    }
  }
  std::vector<uint8_t> gpu_written, cpu_written;
  for (size_t i = 0; i < gpu.size(); ++i) {
    if (!written[i]) {
      ASSERT_EQ(gpu[i], before[i]) << "an unwritten cache byte changed at " << i;
      continue;
    }
    gpu_written.push_back(gpu[i]);
    cpu_written.push_back(cpu[i]);
  }
  EXPECT_LT(rel_l2(read_e4m3(gpu_written, scale), read_e4m3(cpu_written, scale)),
            kE4m3CacheTolerance)
      << (is_v ? "v" : "k") << " cache";
}

// A weight under test (gpu) and the CPU's reference for it (cpu: the same weight, or its
// dequantized values).
struct WeightPair {
  WeightRef cpu, gpu;
};

// A matmul's shape: x (m, k), w (n, k).
struct MatmulShape {
  int64_t m, n, k;
};

// matmul of x (uniform in [-2, 2)) with the WeightPair make(n, k) gives, with and without a
// bias, for every shape.
template <typename MakeWeight>
void expect_matmuls(Twin& twin, Rng& rng, std::initializer_list<MatmulShape> shapes,
                    const MakeWeight& make, const std::string& what) {
  for (const MatmulShape& s : shapes) {
    for (const bool with_bias : {false, true}) {
      Pair x = twin.floats({s.m, s.k}, random_floats(rng, s.m * s.k, -2.0f, 2.0f));
      Pair b = twin.floats({s.n}, random_floats(rng, s.n));
      const auto w = make(s.n, s.k);
      Pair out = twin.output({s.m, s.n});
      twin.cpu().matmul(x.cpu, w.cpu, with_bias ? &b.cpu : nullptr, out.cpu);
      twin.gpu().matmul(x.gpu, w.gpu, with_bias ? &b.gpu : nullptr, out.gpu);
      const Status status = twin.gpu().device_status();
      ASSERT_TRUE(status.ok()) << "m=" << s.m << ": " << status.error().message;
      EXPECT_LT(twin.error(out), tolerance(twin.dtype()))
          << what << " m=" << s.m << " n=" << s.n << " k=" << s.k << " bias=" << with_bias;
    }
  }
}

// The quantized formats' fused decode ops against the CPU's unfused ops, m tokens of h (M, K) with
// a norm gain, with what naming the case in failures.

// rms_matmul_swiglu: silu(gate) * up of rms_norm(h) * gain @ w^T, w (2F, K).
inline void expect_rms_swiglu(Twin& twin, const Pair& h, const Pair& gain, float eps,
                              const WeightPair& w, const std::string& what) {
  const int64_t m = h.cpu.rows(), f = w.cpu.rows() / 2;
  Pair normed = twin.output({m, h.cpu.row_size()});
  twin.cpu().rms_norm(h.cpu, gain.cpu, eps, normed.cpu);
  Pair gate_up = twin.output({m, 2 * f});
  Pair act = twin.output({m, f});
  twin.cpu().matmul(normed.cpu, w.cpu, nullptr, gate_up.cpu);
  twin.cpu().silu_mul(gate_up.cpu, act.cpu);
  twin.gpu().rms_matmul_swiglu(h.gpu, &gain.gpu, w.gpu, eps, act.gpu);
  EXPECT_LT(twin.error(act), tolerance(twin.dtype())) << what << " swiglu m=" << m;
}

// matmul_add: residual (random) += x @ w^T.
inline void expect_matmul_add(Twin& twin, Rng& rng, const Pair& x, const WeightPair& w,
                              const std::string& what) {
  const int64_t m = x.cpu.rows(), n = w.cpu.rows();
  const auto res0 = random_floats(rng, m * n);
  Pair residual = twin.floats({m, n}, res0);
  Pair prod = twin.output({m, n});
  twin.cpu().matmul(x.cpu, w.cpu, nullptr, prod.cpu);
  std::vector<float> want = twin.cpu_floats(prod.cpu);
  const auto res_rounded = twin.representable(res0);
  for (size_t i = 0; i < want.size(); ++i) want[i] += res_rounded[i];
  twin.gpu().matmul_add(x.gpu, w.gpu, residual.gpu);
  EXPECT_LT(rel_l2(twin.gpu_floats(residual.gpu), want), tolerance(twin.dtype()))
      << what << " matmul_add m=" << m;
}

// rms_matmul_rope_cache with a bias: q/k/v of shape's heads of 128 (w rows (Hq + 2 Hkv) 128),
// Llama-3's RoPE at positions first_position + 37 t, cache slots 3 t + 1 in blocks of 16.
inline void expect_rms_rope_cache(Twin& twin, Rng& rng, const Pair& h, const Pair& gain, float eps,
                                  const WeightPair& w, const AttentionShape& shape,
                                  const std::string& what) {
  const int64_t m = h.cpu.rows();
  const int64_t hd = shape.head_dim, hkv = shape.num_kv_heads;
  // Token i goes to slot 3 i + 1: blocks of 16 enough for the last one (at least 2).
  const int64_t nq = int64_t{shape.num_heads + 2 * shape.num_kv_heads} * hd, bs = 16;
  const int64_t blocks = std::max<int64_t>(2, (3 * (m - 1) + 1) / bs + 1);
  const int64_t cache = blocks * hkv * bs * hd;
  Pair bias = twin.floats({nq}, random_floats(rng, nq));
  Pair kc = twin.floats({blocks, hkv, bs, hd}, random_floats(rng, cache));
  Pair vc = twin.floats({blocks, hkv, bs, hd}, random_floats(rng, cache));
  std::vector<int32_t> positions(static_cast<size_t>(m)), slots(static_cast<size_t>(m));
  for (int64_t i = 0; i < m; ++i) {
    positions[static_cast<size_t>(i)] = static_cast<int32_t>(100 + 37 * i);
    slots[static_cast<size_t>(i)] = static_cast<int32_t>(3 * i + 1);
  }
  std::vector<float> inv_freq(static_cast<size_t>(hd / 2));
  for (size_t i = 0; i < inv_freq.size(); ++i)
    inv_freq[i] = static_cast<float>(
        std::pow(500000.0, -2.0 * static_cast<double>(i) / static_cast<double>(hd)));
  Pair pos = twin.ints({m}, positions);
  Pair slot = twin.ints({m}, slots);
  Pair freq = twin.floats({hd / 2}, inv_freq, DType::kF32);
  Pair normed = twin.output({m, h.cpu.row_size()});
  Pair qkv = twin.output({m, nq});
  twin.cpu().rms_norm(h.cpu, gain.cpu, eps, normed.cpu);
  twin.cpu().matmul(normed.cpu, w.cpu, &bias.cpu, qkv.cpu);
  twin.cpu().rope_and_cache(qkv.cpu, pos.cpu, slot.cpu, freq.cpu, {kc.cpu, vc.cpu, 16}, shape);
  twin.gpu().rms_matmul_rope_cache(h.gpu, &gain.gpu, w.gpu, &bias.gpu, eps, pos.gpu, slot.gpu,
                                   freq.gpu, {kc.gpu, vc.gpu, 16}, shape, qkv.gpu);
  EXPECT_LT(twin.error(qkv), tolerance(twin.dtype())) << what << " qkv m=" << m;
  EXPECT_LT(twin.error(kc), tolerance(twin.dtype())) << what << " k cache m=" << m;
  EXPECT_LT(twin.error(vc), tolerance(twin.dtype())) << what << " v cache m=" << m;
}

// The three checks above for m = 1, 5 and 8 tokens of K (4096 unless given; random h, gain in
// [0.2, 2]): F = 512, a residual of 1,024 and 4 q / 2 kv heads of 128, each weight from make(n),
// n rows of K as a WeightPair; ms tokens.
template <typename MakeWeight>
void expect_fused_ops(Twin& twin, Rng& rng, const MakeWeight& make, const std::string& what,
                      int64_t k = 4096, std::initializer_list<int64_t> ms = {1, 5, 8}) {
  const float eps = 1e-5f;
  const int64_t f = 512;
  AttentionShape shape;
  shape.num_heads = 4;
  shape.num_kv_heads = 2;
  shape.head_dim = 128;
  for (const int64_t m : ms) {
    Pair h = twin.floats({m, k}, random_floats(rng, m * k, -1.5f, 1.5f));
    Pair gain = twin.floats({k}, random_floats(rng, k, 0.2f, 2.0f));
    expect_rms_swiglu(twin, h, gain, eps, make(2 * f), what);
    expect_matmul_add(twin, rng, h, make(1024), what);
    expect_rms_rope_cache(twin, rng, h, gain, eps, make((4 + 2 * 2) * 128), shape, what);
    const Status status = twin.gpu().device_status();
    ASSERT_TRUE(status.ok()) << status.error().message;
  }
}

// ops() captured into a CUDA graph, replayed `replays` times, each replay waited for and followed
// by after_each(replay) (debug sync off during the capture, as it requires); a failed capture is
// a test failure.
inline void replay_in_graph(Twin& twin, const std::function<void()>& ops, int replays = 1,
                            const std::function<void(int)>& after_each = {}) {
  twin.gpu().set_debug_sync(false);
  ASSERT_TRUE(twin.gpu().begin_capture().ok());
  ops();
  auto g = twin.gpu().end_capture();
  twin.gpu().set_debug_sync(true);
  ASSERT_TRUE(g.ok()) << g.error().message;
  for (int i = 0; i < replays; ++i) {
    (*g)->replay();
    twin.gpu().synchronize();
    if (after_each) after_each(i);
  }
}

inline std::string dtype_param_name(const ::testing::TestParamInfo<DType>& info) {
  return std::string(dtype_name(info.param));
}

}  // namespace ib::cuda::testing
