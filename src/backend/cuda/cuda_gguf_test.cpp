// Differential tests of kGguf on CUDA (backend/weight.h: a GGUF file's matmul weights in
// llama.cpp's block formats) against the CPU backend's kGguf ops on the same bytes, whose rows
// core/ggml_blocks.h dequantizes (the oracle). Covered: each type alone and a fused weight of
// mixed types (Q4_K_M's q/k in Q4_K and v in Q6_K), matmul through the GEMV (1-8 tokens) and the
// dequantizing path (more), with and without a bias; the fused decode ops (rms_matmul_swiglu,
// matmul_add, rms_matmul_rope_cache: up to 8 tokens the GGUF kernels' fused forms, at K = 4,096
// and past 8,192), IB_GGUF_WIDE's form, and that 5-7 tokens leave the rows past them alone.
// Tolerance: the dtype's; both sides quantize x per 32 identically, the GPU rounds x (and, past 8
// tokens, x' and the weight) to bf16/fp16.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "backend/cuda/detail/kernels.h"
#include "backend/cuda/detail/test_support.h"
#include "core/ggml_blocks.h"

namespace ib::cuda {
namespace {

using testing::Pair;
using testing::random_floats;
using testing::tolerance;
using testing::Twin;

// A weight's row segments: (rows, type) each.
struct Segment {
  int64_t rows;
  GgmlType type;
};
using Segments = std::vector<Segment>;

std::string name_of(const Segments& segments) {
  std::string out;
  for (const Segment& s : segments) {
    if (!out.empty()) out += '+';
    out += std::to_string(s.rows);
    out += 'x';
    out += ggml_type_info(s.type).name;
  }
  return out;
}

struct GgufPair {
  WeightRef cpu, gpu;
};

// Random rows (a different spread per row) quantized into each segment's type, rows padded to a
// stride of 16 bytes past the longest.
GgufPair make_weight(Twin& twin, Rng& rng, int64_t k, const Segments& segments) {
  int64_t n = 0, longest = 0;
  for (const Segment& s : segments) {
    n += s.rows;
    longest = std::max(longest, gguf_row_bytes(s.type, k));
  }
  const int64_t stride = (longest + 15) / 16 * 16;
  std::vector<uint8_t> bytes(static_cast<size_t>(n * stride), 0xAB);  // padding is never read
  GgufRows rows;
  rows.cols = k;
  int64_t r = 0;
  for (const Segment& s : segments) {
    rows.begin[rows.count] = r;
    rows.type[rows.count++] = s.type;
    for (int64_t i = 0; i < s.rows; ++i, ++r) {
      const float spread = 0.02f + 0.1f * static_cast<float>(rng.uniform());
      const std::vector<float> values = random_floats(rng, k, -spread, spread);
      auto q = quantize_ggml(s.type, values);
      EXPECT_TRUE(q.ok());
      std::copy(q->begin(), q->end(), bytes.begin() + r * stride);
    }
  }
  const Pair data = twin.bytes(DType::kU8, {n, stride}, bytes);
  GgufPair w;
  for (auto [ref, t] : {std::pair{&w.cpu, data.cpu}, std::pair{&w.gpu, data.gpu}}) {
    ref->format = WeightFormat::kGguf;
    ref->data = t;
    ref->gguf = rows;
  }
  EXPECT_TRUE(w.gpu.quantized_layout_ok()) << name_of(segments);
  const Status prepared = twin.gpu().prepare_weight(w.gpu);
  EXPECT_TRUE(prepared.ok()) << name_of(segments);
  return w;
}

using Param = std::tuple<DType, Segments>;

class CudaGguf : public ::testing::TestWithParam<Param> {
 protected:
  DType dtype() const { return std::get<0>(GetParam()); }
  const Segments& segments() const { return std::get<1>(GetParam()); }
  // The same types over other row counts (the first segment takes the rest).
  Segments resized(int64_t n) const {
    Segments s = segments();
    int64_t others = 0;
    for (size_t i = 1; i < s.size(); ++i) {
      s[i].rows = std::max<int64_t>(1, n / 8);
      others += s[i].rows;
    }
    s[0].rows = n - others;
    return s;
  }
  void SetUp() override {
    IB_REQUIRE_CUDA();
    Twin probe(dtype());
    if (!probe.gpu().supports_weight_format(WeightFormat::kGguf))
      GTEST_SKIP() << "this GPU lacks dp4a (compute capability 6.1)";
  }
};

// 1-8 tokens take the GEMV, more the dequantizing path; K 3,072 is Phi-3-mini's hidden size.
TEST_P(CudaGguf, MatmulMatchesTheCpu) {
  Twin twin(dtype());
  Rng rng(43);
  testing::expect_matmuls(
      twin, rng,
      {{1, 1000, 4096},
       {2, 64, 256},
       {3, 300, 3072},
       {8, 2048, 4096},
       {9, 200, 1024},
       {64, 512, 4096},
       {1, 3, 512}},
      [&](int64_t n, int64_t k) {
        const GgufPair w = make_weight(twin, rng, k, resized(n));
        return testing::WeightPair{w.cpu, w.gpu};
      },
      name_of(segments()));
}

TEST_P(CudaGguf, FusedOpsMatchTheCpu) {
  Twin twin(dtype());
  Rng rng(44);
  const auto weight = [&](int64_t n) {
    const GgufPair w = make_weight(twin, rng, 4096, resized(n));
    return testing::WeightPair{w.cpu, w.gpu};
  };
  testing::expect_fused_ops(twin, rng, weight, name_of(segments()));
}

// 5-7 tokens run the 8-token kernels: the rows of out past M must stay as they were (out is a view
// of the first M rows of an 8-row buffer holding random values), for the plain, accumulating and
// SwiGLU forms, with IB_GGUF_WIDE off and on.
TEST_P(CudaGguf, RowsPastTheTokensStayUntouched) {
  struct Guard {
    bool saved = gguf_wide();
    ~Guard() { set_gguf_wide(saved); }
  } guard;
  Twin twin(dtype());
  Rng rng(48);
  const int64_t k = 1024, n = 256, f = 128;
  const GgufPair w = make_weight(twin, rng, k, resized(n));
  const GgufPair wgu = make_weight(twin, rng, k, resized(2 * f));
  const Pair gain = twin.floats({k}, random_floats(rng, k, 0.2f, 2.0f));
  for (const bool wide : {false, true}) {
    set_gguf_wide(wide);
    for (const int64_t m : {5, 6, 7}) {
      const Pair x = twin.floats({m, k}, random_floats(rng, m * k, -1.5f, 1.5f));
      const Pair rows = twin.floats({8, n}, random_floats(rng, 8 * n));
      const Pair rows_f = twin.floats({8, f}, random_floats(rng, 8 * f));
      const std::vector<float> before = twin.gpu_floats(rows.gpu);
      const std::vector<float> before_f = twin.gpu_floats(rows_f.gpu);
      twin.gpu().matmul(x.gpu, w.gpu, nullptr, rows.gpu.slice_rows(0, m));
      twin.gpu().matmul_add(x.gpu, w.gpu, rows.gpu.slice_rows(0, m));
      twin.gpu().rms_matmul_swiglu(x.gpu, &gain.gpu, wgu.gpu, 1e-5f, rows_f.gpu.slice_rows(0, m));
      const Status status = twin.gpu().device_status();
      ASSERT_TRUE(status.ok()) << status.error().message;
      const std::vector<float> after = twin.gpu_floats(rows.gpu);
      const std::vector<float> after_f = twin.gpu_floats(rows_f.gpu);
      const auto changed = [&](const std::vector<float>& a, const std::vector<float>& b,
                               int64_t width) {
        int64_t count = 0;
        for (int64_t i = m * width; i < 8 * width; ++i)
          count += a[static_cast<size_t>(i)] != b[static_cast<size_t>(i)] ? 1 : 0;
        return count;
      };
      EXPECT_EQ(changed(before, after, n), 0) << "matmul / matmul_add m=" << m << " wide " << wide;
      EXPECT_EQ(changed(before_f, after_f, f), 0) << "swiglu m=" << m << " wide " << wide;
    }
  }
}

// The fused ops past K = 8,192, where the norm-and-quantize kernel loops over its thread's blocks
// (rms_q8_kernel) instead of keeping one block per thread in registers.
TEST_P(CudaGguf, FusedOpsOfLongRowsMatchTheCpu) {
  Twin twin(dtype());
  Rng rng(47);
  const int64_t k = 8192 + 512;
  const auto weight = [&](int64_t n) {
    const GgufPair w = make_weight(twin, rng, k, resized(n));
    return testing::WeightPair{w.cpu, w.gpu};
  };
  testing::expect_fused_ops(twin, rng, weight, name_of(segments()) + " long rows", k);
}

// IB_GGUF_WIDE's form (K split across a block's warps) against the CPU too; K 3,072 and 256 split
// unevenly across the four warps.
TEST_P(CudaGguf, WideFormsMatchTheCpu) {
  struct Guard {
    bool saved = gguf_wide();
    ~Guard() { set_gguf_wide(saved); }
  } guard;
  set_gguf_wide(true);
  Twin twin(dtype());
  Rng rng(46);
  testing::expect_matmuls(
      twin, rng, {{1, 1000, 4096}, {3, 300, 3072}, {8, 2048, 4096}, {2, 64, 256}},
      [&](int64_t n, int64_t k) {
        const GgufPair w = make_weight(twin, rng, k, resized(n));
        return testing::WeightPair{w.cpu, w.gpu};
      },
      name_of(segments()) + " wide");
  const auto weight = [&](int64_t n) {
    const GgufPair w = make_weight(twin, rng, 4096, resized(n));
    return testing::WeightPair{w.cpu, w.gpu};
  };
  testing::expect_fused_ops(twin, rng, weight, name_of(segments()) + " wide");
}

// Each type alone (one segment of all rows), and Q4_K_M's fused q/k/v mix.
const Segments kSegments[] = {
    {{1, GgmlType::kQ8_0}}, {{1, GgmlType::kQ4_0}},
    {{1, GgmlType::kQ4_K}}, {{1, GgmlType::kQ5_K}},
    {{1, GgmlType::kQ6_K}}, {{1, GgmlType::kQ4_K}, {1, GgmlType::kQ4_K}, {1, GgmlType::kQ6_K}},
};

INSTANTIATE_TEST_SUITE_P(Types, CudaGguf,
                         ::testing::Combine(::testing::Values(DType::kBF16, DType::kF16),
                                            ::testing::ValuesIn(kSegments)),
                         [](const auto& test) {
                           std::string name = std::string(dtype_name(std::get<0>(test.param))) +
                                              "_" + name_of(std::get<1>(test.param));
                           std::replace_if(
                               name.begin(), name.end(),
                               [](char c) { return !std::isalnum(static_cast<unsigned char>(c)); },
                               '_');
                           return name;
                         });

}  // namespace
}  // namespace ib::cuda
