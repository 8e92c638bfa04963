// CudaBackend's VisionOps (backend/ops.h): shape checks, then the launchers of vision.cu and
// attention_vision.cu. Like every op here they neither allocate nor synchronize.
#include "backend/cuda/detail/cuda_backend_impl.h"
#include "backend/cuda/detail/vision_kernels.h"

namespace ib::cuda {

void CudaBackend::layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps,
                             Tensor out) {
  const int64_t d = x.row_size();
  IB_ASSERT(
      x.dtype == dtype_ && out.dtype == dtype_ && weight.dtype == dtype_ && bias.dtype == dtype_,
      "layer_norm: x, weight, bias and out in act");
  IB_ASSERT(
      out.rows() == x.rows() && out.row_size() == d && weight.numel() == d && bias.numel() == d,
      "layer_norm: x, out (T, D); weight, bias (D)");
  IB_ASSERT(d <= kLayerNormMaxDim, "layer_norm: rows of at most 12288 elements");
  if (x.numel() == 0) return;
  run_op("layer_norm", [&] { launch_layer_norm(x, weight, bias, eps, out, stream_); });
}

void CudaBackend::add(Tensor x, const Tensor& y) {
  IB_ASSERT(x.dtype == dtype_ && y.dtype == dtype_ && x.numel() == y.numel(),
            "add: x and y in act, the same size");
  if (x.numel() == 0) return;
  run_op("add", [&] { launch_add(x, y, stream_); });
}

void CudaBackend::activation(Tensor x, VisionActivation act) {
  IB_ASSERT(x.dtype == dtype_, "activation: x in act");
  if (x.numel() == 0) return;
  run_op("activation", [&] { launch_vision_activation(x, act, stream_); });
}

void CudaBackend::bidirectional_attention(const Tensor& qkv, int64_t seq_len, int num_heads,
                                          float scale, Tensor out) {
  const int64_t t = qkv.rows();
  const int64_t width = out.row_size();  // H * hd
  IB_ASSERT(qkv.dtype == dtype_ && out.dtype == dtype_, "bidirectional_attention: act tensors");
  IB_ASSERT(num_heads > 0 && width % num_heads == 0 && qkv.row_size() == 3 * width &&
                out.rows() == t && seq_len > 0 && t % seq_len == 0,
            "bidirectional_attention: qkv (B * S, 3 H hd), out (B * S, H hd)");
  IB_ASSERT(width / num_heads <= kVisionMaxHeadDim,
            "bidirectional_attention: head_dim at most 256");
  run_op("bidirectional_attention",
         [&] { launch_bidirectional_attention(qkv, seq_len, num_heads, scale, out, stream_); });
}

void CudaBackend::rotary_rows(Tensor qkv, const Tensor& cos, const Tensor& sin, int num_heads) {
  const int64_t t = qkv.rows();
  IB_ASSERT(qkv.dtype == dtype_ && cos.dtype == DType::kF32 && sin.dtype == DType::kF32,
            "rotary_rows: qkv in act; cos, sin f32");
  IB_ASSERT(num_heads > 0 && qkv.row_size() % (3 * num_heads) == 0, "rotary_rows: qkv (T, 3 H hd)");
  const int64_t half = qkv.row_size() / (3 * num_heads) / 2;
  IB_ASSERT(half >= 1 && qkv.row_size() == 3 * num_heads * 2 * half && cos.rows() == t &&
                cos.row_size() == half && sin.rows() == t && sin.row_size() == half,
            "rotary_rows: an even head_dim; cos, sin (T, hd / 2)");
  if (t == 0) return;
  run_op("rotary_rows", [&] { launch_rotary_rows(qkv, cos, sin, num_heads, stream_); });
}

void CudaBackend::unfold_patches(const Tensor& pixels, int64_t patch, Tensor out) {
  const int64_t s = pixels.row_size(), p = patch;
  IB_ASSERT(pixels.dtype == dtype_ && out.dtype == dtype_, "unfold_patches: act tensors");
  IB_ASSERT(p > 0 && s % p == 0 && pixels.rows() % (3 * s) == 0,
            "unfold_patches: pixels (N 3 S, S), S a multiple of the patch");
  const int64_t n = pixels.rows() / (3 * s), grid = s / p;
  IB_ASSERT(out.rows() == n * grid * grid && out.row_size() == 3 * p * p,
            "unfold_patches: out (N (S/p)^2, 3 p p)");
  if (n == 0) return;
  run_op("unfold_patches", [&] { launch_unfold_patches(pixels, patch, out, stream_); });
}

}  // namespace ib::cuda
