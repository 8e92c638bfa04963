// The CPU backend's LoRA op (LoraOps): per token, its slot's shrink u = A x and expand B u in
// fp32 (cpu::dot_f32, so a row's result never depends on the batch around it), scaled and added
// into its rows of the projection's output. Tokens of the base model (slot -1) are skipped. And
// the lookahead matrices (LoraOps::lora_lookahead_matrix) in fp32, the CUDA kernel's oracle.
#include <algorithm>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/detail/dot.h"

namespace ib {

void CpuBackend::lora_apply(const Tensor& x, const Tensor& slot_ids, const Tensor& a,
                            const Tensor& b, const Tensor& scales, int64_t row_offset, Tensor out) {
  IB_ASSERT(x.dtype == DType::kF32 && a.dtype == DType::kF32 && b.dtype == DType::kF32 &&
                out.dtype == DType::kF32 && scales.dtype == DType::kF32 &&
                slot_ids.dtype == DType::kI32,
            "lora_apply: x, a, b, out f32 (act), scales f32, slot_ids int32");
  IB_ASSERT(a.rank == 3 && b.rank == 3, "lora_apply: a (S, R, K), b (S, N, R)");
  const int64_t t = x.rows(), k = x.row_size();
  const int64_t s = a.dim(0), r = a.dim(1), n = b.dim(1);
  IB_ASSERT(a.dim(2) == k && b.dim(0) == s && b.dim(2) == r && scales.numel() == s &&
                slot_ids.numel() == t && out.rows() == t && row_offset >= 0 &&
                row_offset + n <= out.row_size(),
            "lora_apply: shapes x (T, K), a (S, R, K), b (S, N, R), scales (S), slot_ids (T), "
            "out (T, >= row_offset + N)");
  const auto* ids = slot_ids.as<const int32_t>();
  const auto* xs = x.as<const float>();
  const auto* as = a.as<const float>();
  const auto* bs = b.as<const float>();
  const auto* sc = scales.as<const float>();
  auto* os = out.as<float>();
  const int64_t out_stride = out.row_size();
  pool_.parallel_for(t, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> u(static_cast<size_t>(r));  // (R) the shrunk token
    for (int64_t i = begin; i < end; ++i) {
      const int32_t slot = ids[i];
      if (slot < 0) continue;
      IB_ASSERT(slot < s, "lora_apply: slot id beyond the stacks");
      const float* xi = xs + i * k;
      const float* ai = as + slot * r * k;
      const float* bi = bs + slot * n * r;
      for (int64_t j = 0; j < r; ++j) u[static_cast<size_t>(j)] = cpu::dot_f32(ai + j * k, xi, k);
      float* oi = os + i * out_stride + row_offset;
      for (int64_t m = 0; m < n; ++m) oi[m] += sc[slot] * cpu::dot_f32(bi + m * r, u.data(), r);
    }
  });
}

void CpuBackend::lora_lookahead_matrix(const Tensor& a_next, const Tensor& w, const Tensor& a,
                                       const Tensor& b, float scale, Tensor m) {
  const int64_t rows = a_next.rows(), n = a_next.row_size(), k = w.row_size(), r = a.rows();
  IB_ASSERT(a_next.dtype == DType::kF32 && w.dtype == DType::kF32 && a.dtype == DType::kF32 &&
                b.dtype == DType::kF32 && m.dtype == DType::kF32,
            "lora_lookahead_matrix: f32 (act) operands");
  IB_ASSERT(w.rows() == n && a.row_size() == k && b.rows() == n && b.row_size() == r &&
                m.rows() == rows && m.row_size() == k,
            "lora_lookahead_matrix: a_next (R, N), w (N, K), a (R', K), b (N, R'), m (R, K)");
  const auto* an = a_next.as<const float>();
  const auto* ws = w.as<const float>();
  const auto* as = a.as<const float>();
  const auto* bs = b.as<const float>();
  auto* ms = m.as<float>();
  pool_.parallel_for(rows, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> c(static_cast<size_t>(r)), row(static_cast<size_t>(k));
    for (int64_t i = begin; i < end; ++i) {
      const float* ai = an + i * n;
      // c = a_next[i] @ b (R'), then m[i] = a_next[i] @ w + scale * c @ a.
      for (int64_t j = 0; j < r; ++j) {
        float sum = 0.0f;
        for (int64_t q = 0; q < n; ++q) sum += ai[q] * bs[q * r + j];
        c[static_cast<size_t>(j)] = sum;
      }
      std::fill(row.begin(), row.end(), 0.0f);
      for (int64_t q = 0; q < n; ++q) {
        const float* wq = ws + q * k;
        for (int64_t col = 0; col < k; ++col) row[static_cast<size_t>(col)] += ai[q] * wq[col];
      }
      for (int64_t j = 0; j < r; ++j) {
        const float cj = scale * c[static_cast<size_t>(j)];
        for (int64_t col = 0; col < k; ++col) row[static_cast<size_t>(col)] += cj * as[j * k + col];
      }
      std::copy(row.begin(), row.end(), ms + i * k);
    }
  });
}

}  // namespace ib
