#include "backend/cuda/detail/gemm_lt.h"

#include <algorithm>
#include <cmath>
#include <functional>

#include "backend/cuda/detail/check.h"
#include "backend/cuda/detail/kernels.h"

namespace ib::cuda {
namespace {

constexpr const char* kOp = "matmul(cublasLt)";

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::kF32:
      return CUDA_R_32F;
    case DType::kBF16:
      return CUDA_R_16BF;
    case DType::kF16:
      return CUDA_R_16F;
    case DType::kF8E4M3:
      return CUDA_R_8F_E4M3;
    case DType::kI8:
      return CUDA_R_8I;
    case DType::kI32:
      return CUDA_R_32I;
    default:
      IB_ASSERT(false, "matmul: float or int8 tensors expected");
  }
  return CUDA_R_32F;
}

// Largest power of two (<= 256) dividing the address: what cuBLASLt may assume.
uint16_t alignment(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  uint16_t align = 256;
  while (align > 1 && a % align != 0) align = static_cast<uint16_t>(align / 2);
  return align;
}

void set_scale_pointers(cublasLtMatmulDesc_t desc, const void* a_scale, const void* b_scale) {
  IB_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER,
                                                 &a_scale, sizeof(a_scale)),
                  kOp);
  IB_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER,
                                                 &b_scale, sizeof(b_scale)),
                  kOp);
}

// dst's first rows rows of row_bytes: src's call_rows rows, repeated (doubling copies).
void repeat_rows(char* dst, const void* src, size_t call_rows, size_t rows, size_t row_bytes,
                 cudaStream_t stream) {
  IB_CUDA_CHECK(cudaMemcpyAsync(dst, src, call_rows * row_bytes, cudaMemcpyDeviceToDevice, stream),
                "matmul tuning");
  for (size_t filled = call_rows; filled < rows;) {
    const size_t n = std::min(filled, rows - filled);
    IB_CUDA_CHECK(cudaMemcpyAsync(dst + filled * row_bytes, dst, n * row_bytes,
                                  cudaMemcpyDeviceToDevice, stream),
                  "matmul tuning");
    filled += n;
  }
}

size_t round256(size_t bytes) {
  return (bytes + 255) / 256 * 256;
}

}  // namespace

size_t GemmLt::KeyHash::operator()(const Key& k) const {
  size_t h = std::hash<int64_t>()(k.m);
  const auto mix = [&h](uint64_t v) { h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2); };
  mix(static_cast<uint64_t>(k.n));
  mix(static_cast<uint64_t>(k.k));
  mix(static_cast<uint64_t>(k.in) << 8 | static_cast<uint64_t>(k.out) << 16 |
      static_cast<uint64_t>(k.bias_epilogue) << 24);
  mix(uint64_t{k.align_x} | uint64_t{k.align_w} << 16 | uint64_t{k.align_out} << 32 |
      uint64_t{k.align_bias} << 48);
  return h;
}

GemmLt::GemmLt() {
  IB_CUBLAS_CHECK(cublasLtCreate(&handle_), kOp);
}

void GemmLt::destroy(Plan& plan) {
  if (plan.a) cublasLtMatrixLayoutDestroy(plan.a);
  if (plan.b) cublasLtMatrixLayoutDestroy(plan.b);
  if (plan.c) cublasLtMatrixLayoutDestroy(plan.c);
  if (plan.desc) cublasLtMatmulDescDestroy(plan.desc);
}

GemmLt::~GemmLt() {
  for (auto& [key, plan] : plans_) destroy(plan);
  if (handle_) cublasLtDestroy(handle_);
}

std::vector<cublasLtMatmulAlgo_t> GemmLt::candidates(const Plan& plan, const Key& key,
                                                     size_t workspace_bytes, int count) {
  cublasLtMatmulPreference_t pref = nullptr;
  IB_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref), kOp);
  const uint64_t ws = workspace_bytes;
  IB_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
                      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)),
                  kOp);
  const auto set_align = [&](cublasLtMatmulPreferenceAttributes_t attr, uint16_t align) {
    const uint32_t v = align;
    IB_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, attr, &v, sizeof(v)), kOp);
  };
  set_align(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, key.align_w);
  set_align(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, key.align_x);
  set_align(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, key.align_out);
  set_align(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, key.align_out);
  std::vector<cublasLtMatmulHeuristicResult_t> results(static_cast<size_t>(count));
  int found = 0;
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(
      handle_, plan.desc, plan.a, plan.b, plan.c, plan.c, pref, count, results.data(), &found);
  cublasLtMatmulPreferenceDestroy(pref);
  std::vector<cublasLtMatmulAlgo_t> algos;
  if (st != CUBLAS_STATUS_SUCCESS) return algos;
  for (int i = 0; i < found; ++i) {
    if (results[static_cast<size_t>(i)].state == CUBLAS_STATUS_SUCCESS)
      algos.push_back(results[static_cast<size_t>(i)].algo);
  }
  return algos;
}

GemmLt::Plan& GemmLt::plan_for(const Key& key, size_t workspace_bytes, const void* a_scale,
                               const void* b_scale) {
  Plan* plan = try_plan_for(key, workspace_bytes, a_scale, b_scale);
  if (plan == nullptr) {
    cublas_fail(CUBLAS_STATUS_NOT_SUPPORTED, kOp, "cublasLtMatmulAlgoGetHeuristic", __FILE__,
                __LINE__);
  }
  return *plan;
}

GemmLt::Plan* GemmLt::try_plan_for(const Key& key, size_t workspace_bytes, const void* a_scale,
                                   const void* b_scale) {
  if (auto it = plans_.find(key); it != plans_.end()) return &it->second;
  Plan plan;
  const cudaDataType_t in = cuda_type(key.in);
  const cudaDataType_t out = cuda_type(key.out);
  const bool integer = key.in == DType::kI8;  // int32 sums and int32 alpha / beta
  IB_CUBLAS_CHECK(
      cublasLtMatmulDescCreate(&plan.desc, integer ? CUBLAS_COMPUTE_32I : CUBLAS_COMPUTE_32F,
                               integer ? CUDA_R_32I : CUDA_R_32F),
      kOp);
  if (key.in == DType::kF8E4M3) {
    // Per-row (w) and per-token (x) scales; the heuristic finds no algorithm for this mode
    // while the scale pointers are unset (measured on the H200), so they are set here too.
    set_scale_pointers(plan.desc, a_scale, b_scale);
    const int32_t mode = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
    IB_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE,
                                                   &mode, sizeof(mode)),
                    kOp);
    IB_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE,
                                                   &mode, sizeof(mode)),
                    kOp);
  }
  const cublasOperation_t trans = CUBLAS_OP_T, no_trans = CUBLAS_OP_N;
  IB_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, &trans, sizeof(trans)),
      kOp);
  IB_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSB, &no_trans,
                                                 sizeof(no_trans)),
                  kOp);
  // Column-major view: out^T (N, M) = w (K, N)^T x^T (K, M).
  const auto n = static_cast<uint64_t>(key.n), m = static_cast<uint64_t>(key.m),
             k = static_cast<uint64_t>(key.k);
  IB_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.a, in, k, n, static_cast<int64_t>(k)), kOp);
  IB_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.b, in, k, m, static_cast<int64_t>(k)), kOp);
  IB_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.c, out, n, m, static_cast<int64_t>(n)), kOp);
  plan.layout_m = key.m;

  const auto heuristic = [&](bool epilogue) {
    const cublasLtEpilogue_t e = epilogue ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    IB_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof(e)),
        kOp);
    const auto algos = candidates(plan, key, workspace_bytes, 1);
    if (algos.empty()) return false;
    plan.algo = algos[0];
    return true;
  };
  plan.bias_epilogue = key.bias_epilogue && heuristic(true);
  if (!plan.bias_epilogue && !heuristic(false)) {  // no algorithm for this shape
    destroy(plan);
    return nullptr;
  }
  return &plans_.emplace(key, plan).first->second;
}

GemmLt::Key GemmLt::key_for(const Tensor& x, const Tensor& w, const Tensor* bias,
                            const Tensor& out) const {
  Key key{};
  key.m = x.rows();
  key.n = w.dim(0);
  key.k = w.dim(1);
  key.in = x.dtype;
  key.out = out.dtype;
  key.bias_epilogue = bias != nullptr && bias->dtype == out.dtype;
  key.align_x = alignment(x.data);
  key.align_w = alignment(w.data);
  key.align_out = alignment(out.data);
  key.align_bias = bias ? alignment(bias->data) : 0;
  return key;
}

float GemmLt::tune(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor out,
                   void* workspace, size_t workspace_bytes, cudaStream_t stream,
                   const TimeFn& time_ms) {
  const Key key = key_for(x, w, bias, out);
  if (key.m == 0) return 0.0f;
  Plan& plan = plan_for(key, workspace_bytes);
  if (plan.bias_epilogue) {
    const void* ptr = bias->data;
    IB_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                   &ptr, sizeof(ptr)),
                    kOp);
  }
  const float alpha = 1.0f, beta = 0.0f;
  float best_ms = INFINITY;
  cublasLtMatmulAlgo_t best = plan.algo;
  for (const cublasLtMatmulAlgo_t& algo : candidates(plan, key, workspace_bytes, kTuneCandidates)) {
    bool ok = true;
    const float ms = time_ms([&] {
      ok = ok && cublasLtMatmul(handle_, plan.desc, &alpha, w.data, plan.a, x.data, plan.b, &beta,
                                out.data, plan.c, out.data, plan.c, &algo, workspace,
                                workspace_bytes, stream) == CUBLAS_STATUS_SUCCESS;
    });
    if (ok && ms < best_ms) {
      best_ms = ms;
      best = algo;
    }
  }
  plan.algo = best;
  return best_ms + (bias && !plan.bias_epilogue ? 0.002f : 0.0f);  // + the bias kernel, roughly
}

int64_t GemmLt::bucket_of(int64_t m, int per_octave) {
  if (per_octave <= 0 || m <= kExactMaxM) return m;
  int64_t p = 1;
  while (p * 2 <= m) p *= 2;  // the octave's start, >= 16
  const int64_t step = std::max<int64_t>(1, p / per_octave);
  return p + (m - p + step - 1) / step * step;
}

void GemmLt::set_m_buckets(int per_octave) {
  IB_ASSERT(per_octave >= 0 && per_octave <= 16 && (per_octave & (per_octave - 1)) == 0,
            "IB_GEMM_M_BUCKETS: 0, 1, 2, 4, 8 or 16 buckets an octave");
  buckets_ = per_octave;
}

void GemmLt::set_prewarm_scratch(void* data, size_t bytes) {
  prewarm_out_ = data;
  prewarm_bytes_ = data ? bytes : 0;
}

void GemmLt::set_layout_m(Plan& plan, int64_t m) {
  if (plan.layout_m == m) return;
  const auto cols = static_cast<uint64_t>(m);
  IB_CUBLAS_CHECK(
      cublasLtMatrixLayoutSetAttribute(plan.b, CUBLASLT_MATRIX_LAYOUT_COLS, &cols, sizeof(cols)),
      kOp);
  IB_CUBLAS_CHECK(
      cublasLtMatrixLayoutSetAttribute(plan.c, CUBLASLT_MATRIX_LAYOUT_COLS, &cols, sizeof(cols)),
      kOp);
  plan.layout_m = m;
}

cublasStatus_t GemmLt::launch(Plan& plan, int64_t m, const Operands& op, void* workspace,
                              size_t workspace_bytes, cudaStream_t stream,
                              const cublasLtMatmulAlgo_t* algo) {
  set_layout_m(plan, m);
  if (plan.bias_epilogue) {
    IB_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                   &op.bias, sizeof(op.bias)),
                    kOp);
  }
  if (op.a_scale != nullptr) set_scale_pointers(plan.desc, op.a_scale, op.b_scale);
  return cublasLtMatmul(handle_, plan.desc, op.alpha, op.w, plan.a, op.x, plan.b, op.beta, op.out,
                        plan.c, op.out, plan.c, algo != nullptr ? algo : &plan.algo, workspace,
                        workspace_bytes, stream);
}

bool GemmLt::matmul(const Key& key, const Operands& op, void* workspace, size_t workspace_bytes,
                    cudaStream_t stream) {
  if (buckets_ > 0 && key.m > kExactMaxM && exact_only_.count(key) == 0) {
    prewarm(key, op, workspace, workspace_bytes, stream);
    Key bucket = key;
    bucket.m = bucket_of(key.m, buckets_);
    Plan* plan = try_plan_for(bucket, workspace_bytes, op.a_scale, op.b_scale);
    if (plan != nullptr &&
        launch(*plan, key.m, op, workspace, workspace_bytes, stream) == CUBLAS_STATUS_SUCCESS)
      return plan->bias_epilogue;
    exact_only_.insert(key);  // no algorithm at the bucket, or it refused this M: M's own plan
  }
  Plan& plan = plan_for(key, workspace_bytes, op.a_scale, op.b_scale);
  IB_CUBLAS_CHECK(launch(plan, key.m, op, workspace, workspace_bytes, stream), kOp);
  return plan.bias_epilogue;
}

void GemmLt::prewarm(const Key& key, const Operands& op, void* workspace, size_t workspace_bytes,
                     cudaStream_t stream) {
  if (capturing_ || prewarm_out_ == nullptr) return;
  Key shape = key;
  shape.m = 0;
  if (!prewarmed_.insert(shape).second) return;
  const int64_t tuned_max_m =
      tuning_ ? tune_buckets(key, op, workspace, workspace_bytes, stream) : 0;
  const auto out_row_bytes = static_cast<int64_t>(dtype_size(key.out)) * key.n;
  const int64_t rows =
      std::min<int64_t>(kExactMaxM, static_cast<int64_t>(prewarm_bytes_) / out_row_bytes);
  if (rows < 1) return;
  static constexpr int64_t kZero = 0;  // beta 0 in either compute type (f32 or int32)
  Operands scratch = op;
  scratch.out = prewarm_out_;
  scratch.beta = &kZero;
  for (int64_t m = bucket_of(kExactMaxM + 1, buckets_); m <= kPrewarmMaxM;
       m = bucket_of(m + 1, buckets_)) {
    if (m <= tuned_max_m) continue;  // loaded by its tuning's launches
    Key bucket = key;
    bucket.m = m;
    // The bucket's algorithm on `rows` of the call's x into the scratch: its module loads now.
    // A refusal (or no algorithm) is the call's to find (matmul falls back), not the prewarm's.
    if (Plan* plan = try_plan_for(bucket, workspace_bytes, op.a_scale, op.b_scale))
      (void)launch(*plan, rows, scratch, workspace, workspace_bytes, stream);
  }
}

int64_t GemmLt::tune_buckets(const Key& key, const Operands& op, void* workspace,
                             size_t workspace_bytes, cudaStream_t stream) {
  // The scratch: x's rows, the FP8 GEMM's per-token scales (its b_scale), then out.
  const bool fp8 = op.a_scale != nullptr;
  const auto x_row_bytes = static_cast<size_t>(key.k) * dtype_size(key.in);
  const auto out_row_bytes = static_cast<size_t>(key.n) * dtype_size(key.out);
  const auto x_bytes = [&](int64_t m) { return round256(static_cast<size_t>(m) * x_row_bytes); };
  const auto scale_bytes = [&](int64_t m) {
    return fp8 ? round256(static_cast<size_t>(m) * sizeof(float)) : 0;
  };
  const auto scratch_bytes = [&](int64_t m) {
    return x_bytes(m) + scale_bytes(m) + static_cast<size_t>(m) * out_row_bytes;
  };
  const int64_t first = bucket_of(kExactMaxM + 1, buckets_);
  int64_t max_m = 0;
  for (int64_t m = first; m <= kPrewarmMaxM && scratch_bytes(m) <= kTuneScratchMaxBytes;
       m = bucket_of(m + 1, buckets_)) {
    max_m = m;
  }
  if (max_m == 0) return 0;
  auto* scratch = static_cast<char*>(tuning_->acquire(scratch_bytes(max_m)));
  if (scratch == nullptr) return 0;
  // The call's rows (and scales), repeated: realistic values for the kernels' timing.
  const auto call_rows = static_cast<size_t>(std::min(key.m, max_m));
  const auto rows = static_cast<size_t>(max_m);
  repeat_rows(scratch, op.x, call_rows, rows, x_row_bytes, stream);
  Operands scratch_op = op;
  scratch_op.x = scratch;
  if (fp8) {
    repeat_rows(scratch + x_bytes(max_m), op.b_scale, call_rows, rows, sizeof(float), stream);
    scratch_op.b_scale = scratch + x_bytes(max_m);
  }
  scratch_op.out = scratch + x_bytes(max_m) + scale_bytes(max_m);
  for (int64_t m = first; m <= max_m; m = bucket_of(m + 1, buckets_)) {
    Key bucket = key;
    bucket.m = m;
    Plan* plan = try_plan_for(bucket, workspace_bytes, scratch_op.a_scale, scratch_op.b_scale);
    if (plan == nullptr) continue;
    set_layout_m(*plan, m);  // the heuristic's candidates at the bucket's own M
    if (fp8) set_scale_pointers(plan->desc, scratch_op.a_scale, scratch_op.b_scale);
    float best_ms = INFINITY;
    for (const cublasLtMatmulAlgo_t& algo :
         candidates(*plan, bucket, workspace_bytes, kTuneCandidates)) {
      bool ok = true;
      const float ms = tuning_->time_ms([&] {
        ok = ok && launch(*plan, m, scratch_op, workspace, workspace_bytes, stream, &algo) ==
                       CUBLAS_STATUS_SUCCESS;
      });
      if (ok && ms < best_ms) {
        best_ms = ms;
        plan->algo = algo;
      }
    }
    if (best_ms < INFINITY) ++tuned_buckets_;
  }
  IB_CUDA_CHECK(cudaStreamSynchronize(stream), "matmul tuning");
  tuning_->release();
  return max_m;
}

void GemmLt::run(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor out, void* workspace,
                 size_t workspace_bytes, cudaStream_t stream, float beta) {
  const Key key = key_for(x, w, bias, out);
  if (key.m == 0) return;
  const float alpha = 1.0f;
  const Operands op{w.data,  x.data, out.data, &alpha, &beta, bias ? bias->data : nullptr,
                    nullptr, nullptr};
  if (!matmul(key, op, workspace, workspace_bytes, stream) && bias != nullptr)
    launch_bias_add(out, *bias, stream);
}

void GemmLt::run_fp8(const Tensor& xq, const Tensor& x_scales, const Tensor& wq,
                     const Tensor& w_scales, const Tensor* bias, Tensor out, void* workspace,
                     size_t workspace_bytes, cudaStream_t stream) {
  IB_ASSERT(xq.dtype == DType::kF8E4M3 && wq.dtype == DType::kF8E4M3 &&
                x_scales.dtype == DType::kF32 && w_scales.dtype == DType::kF32 &&
                x_scales.numel() == xq.rows() && w_scales.numel() == wq.dim(0),
            "matmul(fp8): E4M3 operands with f32 scales per token and per row");
  const Key key = key_for(xq, wq, bias, out);
  if (key.m == 0) return;
  // cuBLASLt's A is w (its rows are out's columns), B is x.
  const float alpha = 1.0f, beta = 0.0f;
  const Operands op{wq.data,       xq.data,      out.data,
                    &alpha,        &beta,        bias ? bias->data : nullptr,
                    w_scales.data, x_scales.data};
  if (!matmul(key, op, workspace, workspace_bytes, stream) && bias != nullptr)
    launch_bias_add(out, *bias, stream);
}

void GemmLt::run_int8(const Tensor& xq, const Tensor& wq, Tensor acc, void* workspace,
                      size_t workspace_bytes, cudaStream_t stream) {
  IB_ASSERT(xq.dtype == DType::kI8 && wq.dtype == DType::kI8 && acc.dtype == DType::kI32,
            "matmul(int8): int8 operands and an int32 result");
  const Key key = key_for(xq, wq, nullptr, acc);
  if (key.m == 0) return;
  const int32_t alpha = 1, beta = 0;
  const Operands op{wq.data, xq.data, acc.data, &alpha, &beta, nullptr, nullptr, nullptr};
  matmul(key, op, workspace, workspace_bytes, stream);
}

}  // namespace ib::cuda
