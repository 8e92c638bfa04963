// The CPU backend's elementwise ops beyond SwiGLU: GeGLU with the tanh gelu, an in-place affine
// map and tanh soft-capping (Gemma-2's activation, scaled embeddings, (1 + w) norm gains and final
// logit soft-capping). fp32 only, like every CPU op.
#include <cmath>

#include "backend/cpu/cpu_backend.h"

namespace ib {
namespace {

void check_f32_tensor(const Tensor& t, const char* what) {
  IB_ASSERT(t.dtype == DType::kF32, what);
}

float gelu_tanh(float x) {
  const float k = 0.7978845608028654f;  // sqrt(2 / pi)
  return 0.5f * x * (1.0f + std::tanh(k * (x + 0.044715f * x * x * x)));
}

}  // namespace

void CpuBackend::gelu_tanh_mul(const Tensor& gate_up, Tensor out) {
  check_f32_tensor(gate_up, "gelu_tanh_mul: gate_up must be fp32");
  check_f32_tensor(out, "gelu_tanh_mul: out must be fp32");
  const int64_t f = out.row_size();
  IB_ASSERT(gate_up.row_size() == 2 * f && gate_up.rows() == out.rows(),
            "gelu_tanh_mul: gate_up (T, 2F), out (T, F)");
  pool_.parallel_for(out.rows(), 1, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* g = gate_up.as<const float>() + r * 2 * f;
      const float* u = g + f;
      float* o = out.as<float>() + r * f;
      for (int64_t i = 0; i < f; ++i) o[i] = gelu_tanh(g[i]) * u[i];
    }
  });
}

void CpuBackend::affine(Tensor x, float mul, float add) {
  check_f32_tensor(x, "affine: x must be fp32");
  float* p = x.as<float>();
  const int64_t n = x.numel();
  for (int64_t i = 0; i < n; ++i) p[i] = p[i] * mul + add;
}

void CpuBackend::softcap(Tensor x, float cap) {
  check_f32_tensor(x, "softcap: x must be fp32");
  IB_ASSERT(cap > 0, "softcap: the cap must be positive");
  float* p = x.as<float>();
  const int64_t n = x.numel();
  for (int64_t i = 0; i < n; ++i) p[i] = cap * std::tanh(p[i] / cap);
}

}  // namespace ib
