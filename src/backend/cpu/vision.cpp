// The CPU backend's vision ops (VisionOps): LayerNorm, residual adds, quick_gelu and erf gelu,
// unmasked attention within each image's tokens (dot products as cpu::dot_f32) and the per-row
// rotary embedding, in fp32.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/detail/dot.h"

namespace ib {

void CpuBackend::layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps,
                            Tensor out) {
  const int64_t d = x.row_size();
  IB_ASSERT(x.dtype == DType::kF32 && out.dtype == DType::kF32 && weight.dtype == DType::kF32 &&
                bias.dtype == DType::kF32,
            "layer_norm: fp32 tensors on the CPU");
  IB_ASSERT(
      out.rows() == x.rows() && out.row_size() == d && weight.numel() == d && bias.numel() == d,
      "layer_norm: x, out (T, D); weight, bias (D)");
  pool_.parallel_for(x.rows(), 1, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* in = x.as<const float>() + r * d;
      float* o = out.as<float>() + r * d;
      float sum = 0.0f;
      for (int64_t i = 0; i < d; ++i) sum += in[i];
      const float mean = sum / static_cast<float>(d);
      float sq = 0.0f;
      for (int64_t i = 0; i < d; ++i) sq += (in[i] - mean) * (in[i] - mean);
      const float inv = 1.0f / std::sqrt(sq / static_cast<float>(d) + eps);
      for (int64_t i = 0; i < d; ++i) {
        o[i] = (in[i] - mean) * inv * weight.as<const float>()[i] + bias.as<const float>()[i];
      }
    }
  });
}

void CpuBackend::add(Tensor x, const Tensor& y) {
  IB_ASSERT(x.dtype == DType::kF32 && y.dtype == DType::kF32 && x.numel() == y.numel(),
            "add: x and y fp32, the same size");
  float* p = x.as<float>();
  const float* q = y.as<const float>();
  const int64_t n = x.numel();
  for (int64_t i = 0; i < n; ++i) p[i] += q[i];
}

void CpuBackend::activation(Tensor x, VisionActivation act) {
  IB_ASSERT(x.dtype == DType::kF32, "activation: x must be fp32");
  float* p = x.as<float>();
  const int64_t n = x.numel();
  if (act == VisionActivation::kQuickGelu) {
    for (int64_t i = 0; i < n; ++i) p[i] = p[i] / (1.0f + std::exp(-1.702f * p[i]));
  } else {
    const float inv_sqrt2 = 0.70710678118654752f;
    for (int64_t i = 0; i < n; ++i) p[i] = 0.5f * p[i] * (1.0f + std::erf(p[i] * inv_sqrt2));
  }
}

void CpuBackend::bidirectional_attention(const Tensor& qkv, int64_t seq_len, int num_heads,
                                         float scale, Tensor out) {
  const int64_t t = qkv.rows();
  const int64_t width = out.row_size();  // H * hd
  IB_ASSERT(qkv.dtype == DType::kF32 && out.dtype == DType::kF32,
            "bidirectional_attention: fp32 on the CPU");
  IB_ASSERT(num_heads > 0 && width % num_heads == 0 && qkv.row_size() == 3 * width &&
                out.rows() == t && seq_len > 0 && t % seq_len == 0,
            "bidirectional_attention: qkv (B * S, 3 H hd), out (B * S, H hd)");
  const int64_t hd = width / num_heads;
  const int64_t stride = 3 * width;
  // One task per (sequence, head, query row).
  pool_.parallel_for(t * num_heads, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> scores(static_cast<size_t>(seq_len));
    for (int64_t task = begin; task < end; ++task) {
      const int64_t row = task / num_heads;
      const int64_t h = task % num_heads;
      const int64_t first = row / seq_len * seq_len;
      const float* q = qkv.as<const float>() + row * stride + h * hd;
      float max_score = -INFINITY;
      for (int64_t j = 0; j < seq_len; ++j) {
        const float* k = qkv.as<const float>() + (first + j) * stride + width + h * hd;
        scores[static_cast<size_t>(j)] = cpu::dot_f32(q, k, hd) * scale;
        max_score = std::max(max_score, scores[static_cast<size_t>(j)]);
      }
      float total = 0.0f;
      for (float& s : scores) total += (s = std::exp(s - max_score));
      float* o = out.as<float>() + row * width + h * hd;
      for (int64_t i = 0; i < hd; ++i) o[i] = 0.0f;
      for (int64_t j = 0; j < seq_len; ++j) {
        const float p = scores[static_cast<size_t>(j)] / total;
        const float* v = qkv.as<const float>() + (first + j) * stride + 2 * width + h * hd;
        for (int64_t i = 0; i < hd; ++i) o[i] += p * v[i];
      }
    }
  });
}

void CpuBackend::rotary_rows(Tensor qkv, const Tensor& cos, const Tensor& sin, int num_heads) {
  const int64_t t = qkv.rows();
  IB_ASSERT(qkv.dtype == DType::kF32 && cos.dtype == DType::kF32 && sin.dtype == DType::kF32,
            "rotary_rows: fp32 on the CPU");
  IB_ASSERT(num_heads > 0 && qkv.row_size() % (3 * num_heads) == 0, "rotary_rows: qkv (T, 3 H hd)");
  const int64_t hd = qkv.row_size() / (3 * num_heads), half = hd / 2;
  IB_ASSERT(hd % 2 == 0 && cos.rows() == t && cos.row_size() == half && sin.rows() == t &&
                sin.row_size() == half,
            "rotary_rows: cos, sin (T, hd / 2)");
  pool_.parallel_for(t, 16, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* c = cos.as<const float>() + r * half;
      const float* s = sin.as<const float>() + r * half;
      float* row = qkv.as<float>() + r * qkv.row_size();
      for (int64_t h = 0; h < 2 * num_heads; ++h) {  // q heads, then k heads
        float* head = row + h * hd;
        for (int64_t i = 0; i < half; ++i) {
          const float x1 = head[i], x2 = head[i + half];
          head[i] = x1 * c[i] - x2 * s[i];
          head[i + half] = x2 * c[i] + x1 * s[i];
        }
      }
    }
  });
}

void CpuBackend::unfold_patches(const Tensor& pixels, int64_t patch, Tensor out) {
  const int64_t s = pixels.row_size(), p = patch;
  IB_ASSERT(pixels.dtype == DType::kF32 && out.dtype == DType::kF32,
            "unfold_patches: fp32 on the CPU");
  IB_ASSERT(p > 0 && s % p == 0 && pixels.rows() % (3 * s) == 0,
            "unfold_patches: pixels (N 3 S, S), S a multiple of the patch");
  const int64_t n = pixels.rows() / (3 * s), grid = s / p;
  IB_ASSERT(out.rows() == n * grid * grid && out.row_size() == 3 * p * p,
            "unfold_patches: out (N (S/p)^2, 3 p p)");
  // Every pixel row's p values under one patch are contiguous on both sides: copied as a run.
  pool_.parallel_for(n * 3 * s, 64, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {  // r = (image, channel, y)
      const int64_t image = r / (3 * s), c = r / s % 3, y = r % s;
      const float* src = pixels.as<const float>() + r * s;
      float* dst =
          out.as<float>() + ((image * grid + y / p) * grid) * 3 * p * p + (c * p + y % p) * p;
      for (int64_t gx = 0; gx < grid; ++gx) std::copy_n(src + gx * p, p, dst + gx * 3 * p * p);
    }
  });
}

}  // namespace ib
