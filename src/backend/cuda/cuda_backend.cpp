// CudaBackend: device setup, the tracked allocator, transfers, and the op dispatch to kernels.
#include "backend/cuda/cuda_backend.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

#include "backend/cuda/detail/check.h"
#include "backend/cuda/detail/cuda_backend_impl.h"
#include "backend/cuda/detail/kernels.h"
#include "backend/cuda/detail/lora_kernels.h"
#include "backend/cuda/detail/quant_switches.h"
#include "backend/cuda/detail/switches.h"
#include "backend/cuda_attention_sizes.h"

namespace ib {

int cuda_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return count;
}

std::optional<DeviceInfo> cuda_device_info(int index) {
  if (index < 0 || index >= cuda_device_count()) return std::nullopt;
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, index) != cudaSuccess) {
    cudaGetLastError();
    return std::nullopt;
  }
  DeviceInfo info;
  info.name = prop.name;
  info.kind = "cuda";
  info.index = index;
  info.total_bytes = static_cast<int64_t>(prop.totalGlobalMem);
  return info;
}

Result<std::unique_ptr<Backend>> create_cuda_backend(const BackendOptions& options) {
  // Checked first, so a bad value is reported on any machine.
  IB_ASSIGN_OR_RETURN(const cuda::CudaSwitches switches, cuda::read_cuda_switches());
  std::string_view spec = options.device;
  int index = 0;
  if (spec != "cuda") {
    if (!spec.starts_with("cuda:"))
      return user_error("unknown device '" + options.device + "'; use cpu, cuda or cuda:N");
    const std::string_view digits = spec.substr(5);
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
    if (ec != std::errc() || end != digits.data() + digits.size() || index < 0)
      return user_error("bad device '" + options.device + "'; use cuda:N with N a device index");
  }
  const int count = cuda_device_count();
  if (count == 0)
    return user_error("no CUDA device found for --device " + options.device +
                      "; run on a machine with an NVIDIA GPU or use --device cpu");
  if (index >= count)
    return user_error("device index " + std::to_string(index) +
                      " is out of range: " + std::to_string(count) +
                      " CUDA device(s) visible (cuda:0.." + std::to_string(count - 1) + ")");
  IB_ASSIGN_OR_RETURN(auto backend,
                      cuda::CudaBackend::create(index, options.dtype, options.memory_limit_bytes));
  IB_TRY(cuda::apply_cuda_switches(switches, *backend));
  return std::unique_ptr<Backend>(std::move(backend));
}

std::optional<CudaQueue> cuda_queue_of(const Backend& backend) {
  const auto* cuda = dynamic_cast<const cuda::CudaBackend*>(&backend);
  if (cuda == nullptr) return std::nullopt;
  return CudaQueue{cuda->device(), cuda->stream()};
}

namespace cuda {
namespace {

void check_same_shape(const Tensor& a, const Tensor& b, const char* context) {
  IB_ASSERT(a.numel() == b.numel() && a.row_size() == b.row_size(), context);
}

// A KV cache the cache ops take: act, or E4M3 with positive scales (backend/ops.h).
bool kv_cache_ok(const KvCacheLayer& kv, DType act) {
  return (kv.k.dtype == act || kv.k.dtype == DType::kF8E4M3) && kv.v.dtype == kv.k.dtype &&
         kv.k_scale > 0.0f && kv.v_scale > 0.0f;
}

// Sequences [begin, begin + count) of a batch as a batch of their own: query_start keeps the
// batch's token offsets, by which the kernels index qkv and out; num_tokens and the hints are the
// caller's to set.
AttentionMetadata sequence_range(const AttentionMetadata& meta, int begin, int count) {
  AttentionMetadata r = meta;
  r.num_seqs = count;
  r.query_start = meta.query_start.slice_rows(begin, count + 1);
  r.context_lens = meta.context_lens.slice_rows(begin, count);
  r.block_tables = meta.block_tables.slice_rows(begin, count);
  r.decode_prefix = 0;
  return r;
}

}  // namespace

Result<std::unique_ptr<CudaBackend>> CudaBackend::create(int device, DType dtype,
                                                         std::optional<int64_t> memory_limit) {
  if (dtype != DType::kF32 && dtype != DType::kBF16 && dtype != DType::kF16)
    return user_error("the CUDA backend runs fp32, bf16 or fp16 activations");
  std::unique_ptr<CudaBackend> backend(new CudaBackend(device, dtype));
  backend->memory().set_limit_bytes(memory_limit);
  IB_TRY(backend->init());
  return backend;
}

Status CudaBackend::init() {
  if (const cudaError_t err = cudaSetDevice(device_); err != cudaSuccess) {
    cudaGetLastError();
    return runtime_error("cannot use CUDA device " + std::to_string(device_) + ": " +
                         cudaGetErrorString(err));
  }
  try {
    cudaDeviceProp prop{};
    IB_CUDA_CHECK(cudaGetDeviceProperties(&prop, device_), "init");
    name_ = prop.name;
    num_sms_ = prop.multiProcessorCount;
    compute_capability_ = prop.major * 10 + prop.minor;
    IB_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "init");
    IB_CUDA_CHECK(cudaEventCreate(&timer_begin_), "init");
    IB_CUDA_CHECK(cudaEventCreate(&timer_end_), "init");
    IB_CUDA_CHECK(cudaEventCreate(&tune_begin_), "init");
    IB_CUDA_CHECK(cudaEventCreate(&tune_end_), "init");
    gemm_ = std::make_unique<GemmLt>();
  } catch (const CudaFailure& e) {
    return runtime_error(std::string("cannot initialise CUDA device ") + std::to_string(device_) +
                         ": " + e.what());
  }
  IB_ASSIGN_OR_RETURN(gemm_workspace_, alloc(kGemmWorkspaceBytes, MemoryTag::kWorkspace));
  IB_ASSIGN_OR_RETURN(attention_workspace_, alloc(kAttentionWorkspaceBytes, MemoryTag::kWorkspace));
  IB_ASSIGN_OR_RETURN(staging_, alloc(kStagingBytes, MemoryTag::kWorkspace));
  IB_ASSIGN_OR_RETURN(attention_counters_, alloc(kAttentionCounterBytes, MemoryTag::kWorkspace));
  IB_ASSIGN_OR_RETURN(sync_counters_, alloc(kSyncCounterBytes, MemoryTag::kWorkspace));
  IB_ASSIGN_OR_RETURN(lora_chain_, alloc(kLoraChainBytes, MemoryTag::kWorkspace));
  run_op("init", [&] {
    IB_CUDA_CHECK(
        cudaMemsetAsync(attention_counters_.data(), 0, attention_counters_.bytes(), stream_),
        "init");
    IB_CUDA_CHECK(cudaMemsetAsync(sync_counters_.data(), 0, sync_counters_.bytes(), stream_),
                  "init");
  });
  IB_TRY(measure_copy_ceiling());
  return device_status();
}

CudaBackend::~CudaBackend() {
  if (stream_) cudaStreamSynchronize(stream_);
  // Buffers free through this object: release them while it is still whole.
  gemm_workspace_.reset();
  gemm_prewarm_.reset();
  gemm_tune_scratch_.reset();
  attention_workspace_.reset();
  staging_.reset();
  attention_counters_.reset();
  sync_counters_.reset();
  lora_chain_.reset();
  attn_lora_buf_.reset();
  quant_scratch_.reset();
  dequant_scratch_.reset();
  int32_scratch_.reset();
  gguf_scratch_.reset();
  quant_gemm_scratch_.reset();
  gemm_.reset();
  if (timer_begin_) cudaEventDestroy(timer_begin_);
  if (timer_end_) cudaEventDestroy(timer_end_);
  if (tune_begin_) cudaEventDestroy(tune_begin_);
  if (tune_end_) cudaEventDestroy(tune_end_);
  if (stream_) cudaStreamDestroy(stream_);
}

void CudaBackend::bind() const {
  IB_CUDA_CHECK(cudaSetDevice(device_), "bind device");
}

void CudaBackend::record_failure(const std::string& message) {
  if (!error_.empty()) return;
  error_ = message;
  if (message.find("Synchronize") != std::string::npos && !debug_sync_) {
    error_ +=
        " (an asynchronous fault raised by an earlier op; rerun with IB_CUDA_DEBUG_SYNC=1 to name "
        "it)";
  }
}

Status CudaBackend::supports_attention(const AttentionShape& shape) const {
  if (split_kv_supports(shape)) return Ok{};
  return user_error("head_dim " + std::to_string(shape.head_dim) +
                    " is not supported by the CUDA attention kernels (" +
                    kCudaAttentionHeadDimsText + "); run this model with --device cpu");
}

Status CudaBackend::device_status() const {
  if (error_.empty()) return Ok{};
  return runtime_error(error_);
}

DeviceInfo CudaBackend::device_info() const {
  DeviceInfo info;
  info.name = name_;
  info.kind = "cuda";
  info.index = device_;
  size_t free_bytes = 0, total_bytes = 0;
  if (cudaSetDevice(device_) != cudaSuccess ||
      cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) {
    cudaGetLastError();  // after a device fault: report no free memory
  }
  info.total_bytes = static_cast<int64_t>(total_bytes);
  info.free_bytes = static_cast<int64_t>(free_bytes);
  return info;
}

Result<void*> CudaBackend::raw_alloc(size_t bytes) {
  IB_TRY(device_status());
  if (capturing_) return runtime_error("allocation during graph capture");
  void* ptr = nullptr;
  cudaError_t err = cudaSetDevice(device_);
  if (err == cudaSuccess) err = cudaMalloc(&ptr, std::max<size_t>(bytes, 1));
  if (err != cudaSuccess) {
    cudaGetLastError();  // an allocation failure is not sticky; clear it
    size_t free_bytes = 0, total_bytes = 0;
    cudaMemGetInfo(&free_bytes, &total_bytes);
    return runtime_error("out of device memory on cuda:" + std::to_string(device_) +
                         ": allocating " + std::to_string(bytes) + " bytes failed (" +
                         std::to_string(free_bytes) + " of " + std::to_string(total_bytes) +
                         " bytes free); use a smaller model, batch or --gpu-memory-utilization");
  }
  return ptr;
}

void CudaBackend::raw_free(void* ptr, size_t /*bytes*/) {
  // After a device fault every call fails; the memory goes with the context.
  if (cudaSetDevice(device_) != cudaSuccess || cudaFree(ptr) != cudaSuccess) {
    cudaGetLastError();
    record_failure("CUDA error in op 'free': cudaFree failed");
  }
}

void CudaBackend::copy_from_host(Tensor dst, const void* src, DType src_dtype) {
  const int64_t n = dst.numel();
  if (n == 0) return;
  run_op("copy_from_host", [&] { copy_from_host_impl(dst, src, src_dtype, n); });
}

void CudaBackend::copy_from_host_impl(Tensor dst, const void* src, DType src_dtype, int64_t n) {
  if (src_dtype == dst.dtype) {
    IB_CUDA_CHECK(cudaMemcpyAsync(dst.data, src, dst.bytes(), cudaMemcpyHostToDevice, stream_),
                  "copy_from_host");
  } else {
    // Convert on the device through the staging buffer, one chunk at a time; stream order keeps
    // a chunk's upload behind the previous chunk's conversion.
    const size_t src_size = dtype_size(src_dtype);
    const int64_t chunk = static_cast<int64_t>(kStagingBytes / src_size);
    for (int64_t off = 0; off < n; off += chunk) {
      const int64_t count = std::min(chunk, n - off);
      IB_CUDA_CHECK(
          cudaMemcpyAsync(staging_.data(), static_cast<const char*>(src) + off * src_size,
                          static_cast<size_t>(count) * src_size, cudaMemcpyHostToDevice, stream_),
          "copy_from_host");
      launch_convert(staging_.data(), src_dtype,
                     static_cast<char*>(dst.data) + off * dtype_size(dst.dtype), dst.dtype, count,
                     stream_);
    }
  }
}

void CudaBackend::copy_to_host(const Tensor& src, void* dst) {
  run_op("copy_to_host", [&] {
    IB_CUDA_CHECK(cudaMemcpyAsync(dst, src.data, src.bytes(), cudaMemcpyDeviceToHost, stream_),
                  "copy_to_host");
    IB_CUDA_CHECK(cudaStreamSynchronize(stream_), "copy_to_host");
  });
}

void CudaBackend::synchronize() {
  run_op("synchronize", [&] { IB_CUDA_CHECK(cudaStreamSynchronize(stream_), "synchronize"); });
}

void CudaBackend::fill_uniform(Tensor dst, uint64_t seed, uint64_t stream, float scale) {
  run_op("fill_uniform", [&] { launch_fill_uniform(dst, seed, stream, scale, stream_); });
}

void CudaBackend::fill_constant(Tensor dst, float value) {
  run_op("fill_constant", [&] { launch_fill_constant(dst, value, stream_); });
}

void CudaBackend::embedding(const Tensor& token_ids, const Tensor& table, Tensor out) {
  IB_ASSERT(token_ids.dtype == DType::kI32 && token_ids.numel() == out.rows(),
            "embedding: token_ids must be int32 (T) for out (T, D)");
  IB_ASSERT(table.dtype == out.dtype && table.row_size() == out.row_size(),
            "embedding: table (V, D) and out (T, D) must agree");
  run_op("embedding", [&] { launch_gather_rows(table, token_ids, out, stream_, pdl_); });
}

void CudaBackend::rms_norm(const Tensor& x, const Tensor& weight, float eps, Tensor out) {
  check_same_shape(x, out, "rms_norm: x and out must have the same shape");
  IB_ASSERT(weight.numel() == x.row_size() && weight.dtype == x.dtype && out.dtype == x.dtype,
            "rms_norm: weight (D) and out must match x (T, D)");
  run_op("rms_norm", [&] { launch_rms_norm(nullptr, x, weight, eps, out, stream_, pdl_); });
}

void CudaBackend::add_rms_norm(Tensor residual, const Tensor& x, const Tensor& weight, float eps,
                               Tensor out) {
  check_same_shape(x, out, "add_rms_norm: x and out must have the same shape");
  check_same_shape(x, residual, "add_rms_norm: x and residual must have the same shape");
  IB_ASSERT(weight.numel() == x.row_size() && weight.dtype == x.dtype &&
                residual.dtype == x.dtype && out.dtype == x.dtype,
            "add_rms_norm: residual, weight and out must match x");
  run_op("add_rms_norm", [&] { launch_rms_norm(&residual, x, weight, eps, out, stream_, pdl_); });
}

void CudaBackend::norm_add_rms_norm(Tensor residual, Tensor x, const Tensor& x_weight,
                                    const Tensor& weight, float eps, Tensor out) {
  check_same_shape(x, out, "norm_add_rms_norm: x and out must have the same shape");
  check_same_shape(x, residual, "norm_add_rms_norm: x and residual must have the same shape");
  IB_ASSERT(weight.numel() == x.row_size() && x_weight.numel() == x.row_size() &&
                weight.dtype == x.dtype && x_weight.dtype == x.dtype && residual.dtype == x.dtype &&
                out.dtype == x.dtype,
            "norm_add_rms_norm: residual, both weights and out must match x");
  bool fused = false;
  run_op("norm_add_rms_norm", [&] {
    fused = launch_norm_add_rms_norm(residual, x, x_weight, weight, eps, out, stream_, pdl_);
  });
  if (!fused) DenseOps::norm_add_rms_norm(residual, x, x_weight, weight, eps, out);
}

void CudaBackend::matmul(const Tensor& x, const WeightRef& weight, const Tensor* bias, Tensor out) {
  const Tensor& w = weight.data;
  IB_ASSERT(x.row_size() == weight.cols() && w.rank == 2,
            "matmul: x (M, K) and w (N, K) must share K");
  IB_ASSERT(out.rows() == x.rows() && out.row_size() == w.dim(0),
            "matmul: out must be (M, N) for x (M, K) and w (N, K)");
  if (bias) IB_ASSERT(bias->numel() == w.dim(0), "matmul: bias must be (N)");
  if (is_quantized(weight.format)) {
    IB_ASSERT(supports_weight_format(weight.format) && x.dtype == dtype_ && out.dtype == dtype_,
              "matmul: a quantized weight takes x and out in the bf16/fp16 activation dtype");
    if (observer_) observer_(x, weight);  // calibration: outside run_op, it copies to the host
    run_op("matmul(quantized)", [&] { matmul_quantized(x, weight, bias, out); });
    return;
  }
  IB_ASSERT(x.dtype == w.dtype && (out.dtype == x.dtype || out.dtype == DType::kF32),
            "matmul: x and w share the activation dtype; out is that or f32");
  run_op("matmul", [&] {
    if (choose_gemv(x, w, bias, out)) {
      launch_gemv(x, w, bias, out, stream_, pdl_);
    } else {
      gemm_->run(x, w, bias, out, gemm_workspace_.data(), gemm_workspace_.bytes(), stream_);
    }
  });
}

int64_t CudaBackend::quant_gemv_rows(WeightFormat format) const {
  return format == WeightFormat::kFp8E4M3 ? fp8_gemv_max_m_ : cuda::gemv_max_m(format);
}

// Up to the GEMV's rows (fp8_gemv_max_m_ for FP8) the GEMV runs, on x quantized per token (W8A8)
// or as it is (W8A16). Above: FP8 quantizes x and cuBLASLt runs the E4M3 GEMM with the token and
// row scales as outer-vector scales; INT8 W8A8 quantizes x, cuBLASLt sums in int32 and a kernel
// applies the scales; W8A16 dequantizes the weight into the activation dtype for cuBLASLt. The
// W8A8 paths go in chunks of rows that fit the scratch.
void CudaBackend::matmul_quantized(const Tensor& x, const WeightRef& w, const Tensor* bias,
                                   Tensor out) {
  if (w.format == WeightFormat::kGguf) {
    matmul_gguf(x, w, bias, out, false);
    return;
  }
  if (x.rows() <= quant_gemv_rows(w.format) && gemv_supported(x, w, out)) {
    const GemvQuantAct act = quant_act(x, w);
    launch_gemv(x, w, bias, out, stream_, pdl_, &act);
    return;
  }
  IB_ASSERT(quant_scratch_.data() != nullptr,
            "matmul(quantized): no scratch (quantize_weight allocates it)");
  if (!quantizes_activations(w.format)) {  // W8A16, W4A16, NF4
    if (quant_gemm(x, w, bias, out, false)) return;
    gemm_->run(x, dequantized(w), bias, out, gemm_workspace_.data(), gemm_workspace_.bytes(),
               stream_);
    return;
  }
  const int64_t k = x.row_size();
  const int64_t n = w.data.dim(0);
  int64_t chunk = std::min<int64_t>(
      kQuantScaleBytes / 4, std::max<int64_t>(1, (kQuantScratchBytes - kQuantScaleBytes) / k));
  if (w.format == WeightFormat::kInt8W8A8) {
    chunk = std::min<int64_t>(chunk, static_cast<int64_t>(int32_scratch_.bytes()) / (4 * n));
  }
  IB_ASSERT(chunk >= 1, "matmul(quantized): the scratch holds no row");
  const StaticActQuant fixed = static_act_quant(w);
  for (int64_t r0 = 0; r0 < x.rows(); r0 += chunk) {
    const int64_t rows = std::min(chunk, x.rows() - r0);
    Tensor xq = quant_scratch_.view(w.data.dtype, {rows, k}, static_cast<size_t>(kQuantScaleBytes));
    Tensor x_scales = quant_scratch_.view(DType::kF32, {rows});
    launch_quantize_rows(x.slice_rows(r0, rows), xq, x_scales, stream_, fixed);
    if (w.format == WeightFormat::kFp8E4M3) {
      gemm_->run_fp8(xq, x_scales, w.data, w.scales, bias, out.slice_rows(r0, rows),
                     gemm_workspace_.data(), gemm_workspace_.bytes(), stream_);
    } else {
      Tensor acc = int32_scratch_.view(DType::kI32, {rows, n});
      gemm_->run_int8(xq, w.data, acc, gemm_workspace_.data(), gemm_workspace_.bytes(), stream_);
      launch_dequantize_int32(acc, x_scales, w.scales, bias, out.slice_rows(r0, rows), stream_,
                              fixed.zero(), fixed.zero() != 0 ? &w.input_row_sums : nullptr);
    }
  }
}

// A kGguf weight's fused op of at most the GGUF GEMV's tokens without adapters takes the GGUF
// kernels' fused forms (launch_rms_gemv_gguf).
bool CudaBackend::gguf_fused(const Tensor& h, const Tensor* gain, const WeightRef& w,
                             const FusedLora* lora) const {
  return w.format == WeightFormat::kGguf && gain != nullptr && lora == nullptr &&
         h.rows() <= kGgufGemvMaxM && gguf_operands_ok(h, w) && gguf_scratch_.data() != nullptr &&
         reinterpret_cast<uintptr_t>(gain->data) % 16 == 0;
}

void CudaBackend::matmul_gguf(const Tensor& x, const WeightRef& w, const Tensor* bias, Tensor out,
                              bool accumulate) {
  IB_ASSERT(gguf_operands_ok(x, w) && gguf_scratch_.data() != nullptr,
            "matmul(gguf): x (M, K) bf16/fp16 and a kGguf weight readied by prepare_weight");
  if (x.rows() <= kGgufGemvMaxM) {
    launch_gemv_gguf(x, w, bias, out, accumulate, gguf_scratch_.data(), gguf_scratch_.bytes(),
                     stream_, pdl_);
    return;
  }
  const Tensor dense = dequantized(w);
  const int64_t k = x.row_size();
  const int64_t chunk =
      static_cast<int64_t>(gguf_scratch_.bytes()) / (k * static_cast<int64_t>(dtype_size(dtype_)));
  IB_ASSERT(chunk >= 1, "matmul(gguf): the scratch holds no row");
  for (int64_t r0 = 0; r0 < x.rows(); r0 += chunk) {
    const int64_t rows = std::min(chunk, x.rows() - r0);
    const Tensor xq = gguf_scratch_.view(dtype_, {rows, k});
    launch_q8_round_trip(x.slice_rows(r0, rows), xq, stream_);
    gemm_->run(xq, dense, bias, out.slice_rows(r0, rows), gemm_workspace_.data(),
               gemm_workspace_.bytes(), stream_, accumulate ? 1.0f : 0.0f);
  }
}

bool CudaBackend::quant_gemm(const Tensor& x, const WeightRef& w, const Tensor* bias, Tensor out,
                             bool accumulate) {
  if (x.rows() > quant_gemm_rows_ || quant_gemm_scratch_.data() == nullptr ||
      !quant_gemm_takes(x, w) || (bias != nullptr && bias->dtype != x.dtype))
    return false;
  launch_quant_gemm(x, w, bias, out, accumulate, quant_gemm_scratch_.data(),
                    quant_gemm_scratch_.bytes(), num_sms_, stream_);
  ++quant_gemm_launches_;
  return true;
}

Tensor CudaBackend::dequantized(const WeightRef& w) {
  IB_ASSERT(static_cast<int64_t>(dequant_scratch_.bytes()) >=
                w.rows() * w.cols() * static_cast<int64_t>(dtype_size(dtype_)),
            "matmul(quantized): the dequantization scratch is smaller than the weight");
  const Tensor dense = dequant_scratch_.view(dtype_, {w.rows(), w.cols()});
  if (is_4bit(w.format)) {
    launch_dequantize_4bit(w, dense, stream_);
  } else if (w.format == WeightFormat::kGguf) {
    launch_dequantize_gguf(w, dense, stream_);
  } else {
    launch_dequantize_int8(w, dense, stream_);
  }
  return dense;
}

// The fused ops' unfused form for weights the fused GEMV does not take (act-order W4A16, groups
// under 128):
// rms_norm(h) * gain into the scratch after x's region, then the matmul.
Tensor CudaBackend::normed_for_fallback(const Tensor& h, const Tensor* gain, float eps) {
  IB_ASSERT(gain != nullptr, "fused op fallback: a quantized weight keeps its norm gain");
  IB_ASSERT(quant_scratch_.data() != nullptr &&
                h.numel() * static_cast<int64_t>(dtype_size(dtype_)) <= kFallbackXnBytes,
            "fused op fallback: no scratch, or more rows than it holds");
  Tensor xn =
      quant_scratch_.view(dtype_, {h.rows(), h.row_size()}, static_cast<size_t>(kQuantScaleBytes));
  launch_rms_norm(nullptr, h, *gain, eps, xn, stream_, pdl_);
  return xn;
}

// A (rows, cols) scratch after the normalised x of normed_for_fallback.
Tensor CudaBackend::fallback_scratch(int64_t rows, int64_t cols) {
  const int64_t offset = kQuantScaleBytes + kFallbackXnBytes;
  IB_ASSERT(offset + rows * cols * static_cast<int64_t>(dtype_size(dtype_)) <= kQuantScratchBytes,
            "fused op fallback: the scratch is too small");
  return quant_scratch_.view(dtype_, {rows, cols}, static_cast<size_t>(offset));
}

GemvQuantAct CudaBackend::quant_act(const Tensor& x, const WeightRef& w) const {
  if (!is_quantized(w.format)) return {};
  IB_ASSERT(quant_scratch_.data() != nullptr &&
                x.rows() * x.row_size() * static_cast<int64_t>(dtype_size(dtype_)) <=
                    kQuantScratchBytes - kQuantScaleBytes,
            "quantized GEMV: the activation scratch (allocated with the first quantized weight) "
            "is too small");
  GemvQuantAct act;
  const auto offset = static_cast<size_t>(kQuantScaleBytes);
  if (quantizes_activations(w.format)) {
    act.scales = quant_scratch_.view(DType::kF32, {x.rows()});
    act.xq = quant_scratch_.view(w.data.dtype, {x.rows(), x.row_size()}, offset);
  } else {
    act.xn = quant_scratch_.view(dtype_, {x.rows() * x.row_size()}, offset);
  }
  if (quant_sync() > 0) {  // the sets alternate between calls (GemvQuantAct::sync)
    act.sync = flag_set(kLoraCounterBytes, kQuantSyncWords, quant_sync_pairs_++ % kQuantSyncSets);
  }
  return act;
}

std::vector<unsigned> CudaBackend::quant_sync_words() {
  return counter_words(kLoraCounterBytes, size_t{kQuantSyncSets} * kQuantSyncWords);
}

bool CudaBackend::supports_weight_format(WeightFormat format) const {
  const bool half = dtype_ == DType::kBF16 || dtype_ == DType::kF16;
  switch (format) {
    case WeightFormat::kDense:
      return true;
    case WeightFormat::kFp8E4M3:  // E4M3 tensor cores from Ada (8.9); bf16/fp16 activations
      return compute_capability_ >= 89 && half;
    case WeightFormat::kInt8W8A16:  // m16n8k16 / m16n8k32 s8 MMAs from Ampere (8.0)
    case WeightFormat::kInt8W8A8:
      return compute_capability_ >= 80 && half;
    case WeightFormat::kInt4W4A16:  // bf16 / f16 MMAs, x unquantized (W4A16)
    case WeightFormat::kNf4:
      return compute_capability_ >= 80 && half;
    case WeightFormat::kGguf:  // dp4a from Pascal (6.1)
      return compute_capability_ >= 61 && half;
  }
  return false;
}

Status CudaBackend::reserve_quant_scratch(const WeightRef& w) {
  const auto reserve = [&](Buffer& buf, int64_t bytes) -> Status {
    if (static_cast<int64_t>(buf.bytes()) >= bytes) return Ok{};
    buf.reset();
    IB_ASSIGN_OR_RETURN(buf, alloc(static_cast<size_t>(bytes), MemoryTag::kWorkspace));
    return Ok{};
  };
  IB_TRY(reserve(quant_scratch_, kQuantScratchBytes));
  if (quantizes_activations(w.format)) w8a8_weights_ = true;  // IB_PDL=3's condition
  if (w.format == WeightFormat::kInt8W8A16 || is_4bit(w.format) ||
      w.format == WeightFormat::kGguf) {
    IB_TRY(
        reserve(dequant_scratch_, w.rows() * w.cols() * static_cast<int64_t>(dtype_size(dtype_))));
  }
  if ((w.format == WeightFormat::kInt8W8A16 || is_4bit(w.format)) && quant_gemm_rows_ > 0) {
    IB_TRY(reserve(quant_gemm_scratch_, static_cast<int64_t>(kQuantGemmScratchBytes)));
    if (!quant_gemm_prepared_) {  // once per backend: the allowance is its device's
      cudaError_t err = cudaSetDevice(device_);
      if (err == cudaSuccess) err = prepare_quant_gemm();
      if (err != cudaSuccess) {
        return runtime_error(std::string("quant_gemm: cannot allow its shared memory: ") +
                             cudaGetErrorString(err));
      }
      quant_gemm_prepared_ = true;
    }
  }
  if (w.format == WeightFormat::kGguf) {
    // The GEMV's tokens, or 16 MiB of prefill rows (at least one).
    const int64_t row = w.cols() * static_cast<int64_t>(dtype_size(dtype_));
    IB_TRY(reserve(gguf_scratch_, std::max({gguf_gemv_scratch_bytes(kGgufGemvMaxM, w.cols()),
                                            int64_t{16} << 20, row})));
  }
  if (w.format == WeightFormat::kInt8W8A8) IB_TRY(reserve(int32_scratch_, kQuantScratchBytes));
  return Ok{};
}

void CudaBackend::quantize_weight(const Tensor& dense, const WeightRef& out) {
  IB_ASSERT(supports_weight_format(out.format) && is_quantized(out.format),
            "quantize_weight: fp8 needs compute capability 8.9+, int8 8.0+, and bf16/fp16 "
            "activations");
  IB_ASSERT(dense.rank == 2 && out.quantized_layout_ok() && out.rows() == dense.rows() &&
                out.cols() == dense.row_size(),
            "quantize_weight: out must be a quantized format's layout (backend/weight.h) for "
            "dense (N, K)");
  if (Status st = reserve_quant_scratch(out); !st.ok()) {
    record_failure("quantize_weight: " + st.error().message);
    return;
  }
  if (is_4bit(out.format)) {
    run_op("quantize_weight", [&] { launch_quantize_4bit(dense, out, !out.asymmetric, stream_); });
    return;
  }
  run_op("quantize_weight", [&] { launch_quantize_rows(dense, out.data, out.scales, stream_); });
}

bool CudaBackend::fused_decode_fits(const AttentionShape& shape, int64_t hidden_size,
                                    int64_t intermediate_size) const {
  return fused_decode(0) && gemv_fused_shapes_fit(shape, hidden_size, intermediate_size);
}

bool CudaBackend::fused_decode(int64_t num_tokens) const {
  const bool half = dtype_ == DType::kBF16 || dtype_ == DType::kF16;
  // While observing (calibration), every matmul input passes through matmul().
  return fused_ && !observer_ && half && num_tokens >= 0 && num_tokens <= kGemvFusedMaxM;
}

void CudaBackend::weight_row_sums(const WeightRef& w, Tensor out) {
  run_op("weight_row_sums", [&] { launch_weight_row_sums(w, out, stream_); });
}

void CudaBackend::rms_matmul_rope_cache(const Tensor& h, const Tensor* gain,
                                        const WeightRef& weight, const Tensor* bias, float eps,
                                        const Tensor& positions, const Tensor& slot_mapping,
                                        const Tensor& inv_freq, const KvCacheLayer& kv,
                                        const AttentionShape& shape, Tensor qkv,
                                        const FusedLora* lora) {
  const Tensor& w = weight.data;
  IB_ASSERT(h.row_size() == weight.cols() && qkv.rows() == h.rows() && qkv.row_size() == w.dim(0),
            "rms_matmul_rope_cache: h (M, K), w (N, K), qkv (M, N)");
  IB_ASSERT(positions.numel() == h.rows() && slot_mapping.numel() == h.rows() &&
                inv_freq.numel() == shape.head_dim / 2 && inv_freq.dtype == DType::kF32,
            "rms_matmul_rope_cache: positions, slot_mapping (M), inv_freq f32 (head_dim / 2)");
  if (bias) IB_ASSERT(bias->numel() == w.dim(0), "rms_matmul_rope_cache: bias must be (N)");
  run_op("rms_matmul_rope_cache", [&] {
    const bool gemv = gemv_rope_cache_supported(h, weight, shape);
    const LoraShrinkNorm norm{gain, eps};
    const GemvLora l =
        lora ? fused_lora_operands(h, &norm, *lora, qkv.row_size(), gemv, weight, nullptr)
             : GemvLora{};
    if (!gemv && gguf_fused(h, gain, weight, lora)) {  // the norm in the quantize kernel
      launch_rms_gemv_gguf(h, *gain, eps, weight, bias, qkv, false, gguf_scratch_.data(),
                           gguf_scratch_.bytes(), stream_, pdl_);
      launch_rope_and_cache(qkv, positions, slot_mapping, inv_freq, kv, shape, stream_, pdl_);
      return;
    }
    if (!gemv) {
      matmul_quantized(normed_for_fallback(h, gain, eps), weight, bias, qkv);
      if (lora) fused_lora_expand(l, *lora, qkv);
      launch_rope_and_cache(qkv, positions, slot_mapping, inv_freq, kv, shape, stream_, pdl_);
      return;
    }
    const GemvQuantAct act = quant_act(h, weight);
    launch_gemv_rope_cache(h, gain, weight, bias, eps, positions, slot_mapping, inv_freq, kv, shape,
                           qkv, stream_, pdl_, &act, lora ? &l : nullptr);
  });
}

void CudaBackend::rms_matmul_swiglu(const Tensor& h, const Tensor* gain, const WeightRef& weight,
                                    float eps, Tensor out, const FusedLora* lora) {
  const Tensor& w = weight.data;
  IB_ASSERT(
      h.row_size() == weight.cols() && out.rows() == h.rows() && 2 * out.row_size() == w.dim(0),
      "rms_matmul_swiglu: h (M, K), w (2F, K), out (M, F)");
  // (cuBLASLt into fp32 scratch plus a norm/SwiGLU kernel measured slower at 1-8 rows:
  // bench/NOTES.md, phase 5.)
  run_op("rms_matmul_swiglu", [&] {
    const bool gemv = gemv_fused_supported(h, weight, GemvFusion::kRmsSwiGlu);
    const LoraShrinkNorm norm{gain, eps};
    const GemvLora l =
        lora ? fused_lora_operands(h, &norm, *lora, w.dim(0), gemv, weight, &out) : GemvLora{};
    if (!gemv && gguf_fused(h, gain, weight, lora)) {  // the norm and the SwiGLU in its kernels
      launch_rms_gemv_gguf(h, *gain, eps, weight, nullptr, out, true, gguf_scratch_.data(),
                           gguf_scratch_.bytes(), stream_, pdl_);
      return;
    }
    if (!gemv) {
      const Tensor gate_up = fallback_scratch(h.rows(), w.dim(0));
      matmul_quantized(normed_for_fallback(h, gain, eps), weight, nullptr, gate_up);
      if (lora) fused_lora_expand(l, *lora, gate_up);
      launch_silu_mul(gate_up, out, stream_, pdl_);
      return;
    }
    const GemvQuantAct act = quant_act(h, weight);
    launch_gemv_fused(h, gain, weight, nullptr, out, GemvFusion::kRmsSwiGlu, eps, stream_, pdl_,
                      &act, lora ? &l : nullptr);
  });
}

void CudaBackend::matmul_add(const Tensor& x, const WeightRef& weight, Tensor residual,
                             const FusedLora* lora) {
  const Tensor& w = weight.data;
  IB_ASSERT(x.row_size() == weight.cols() && residual.rows() == x.rows() &&
                residual.row_size() == w.dim(0),
            "matmul_add: x (M, K), w (N, K), residual (M, N)");
  run_op("matmul_add", [&] {
    // A dense weight the fused GEMV does not take (rows past it, f32) goes to cuBLASLt too.
    const bool gemv_takes = gemv_fused_supported(x, weight, GemvFusion::kAccumulate);
    const bool cublaslt =
        weight.format == WeightFormat::kDense &&
        (!gemv_takes || (add_with_cublaslt_ && x.rows() >= 2 &&
                         static_cast<int64_t>(w.bytes()) > gemv_max_weight_bytes_));
    const bool gemv = !cublaslt && gemv_takes;
    const GemvLora l =
        lora ? fused_lora_operands(x, nullptr, *lora, w.dim(0), gemv, weight, &residual)
             : GemvLora{};
    // With IB_ADD_CUBLASLT=1, from 2 tokens on, a weight above the GEMV's size rule (Llama-3-8B's
    // down projection) goes to cuBLASLt with beta = 1: at 8 tokens 31.7 µs against the GEMV's
    // 36.1 alone (bench/NOTES.md, phase 4), but under programmatic dependent launch, in which
    // cuBLASLt's kernels take no part, the GEMV's step is 1.2 % faster on the seed protocol
    // (bench/results/h200/pdl/default), so the GEMV is the default.
    // (FP8 weights always take the GEMV here.)
    if (cublaslt) {
      gemm_->run(x, w, nullptr, residual, gemm_workspace_.data(), gemm_workspace_.bytes(), stream_,
                 1.0f);
      if (lora) fused_lora_expand(l, *lora, residual);
    } else if (!gemv && weight.format == WeightFormat::kGguf) {
      matmul_gguf(x, weight, nullptr, residual, true);
      if (lora) fused_lora_expand(l, *lora, residual);
    } else if (!gemv) {
      if (!quant_gemm(x, weight, nullptr, residual, true)) {
        gemm_->run(x, dequantized(weight), nullptr, residual, gemm_workspace_.data(),
                   gemm_workspace_.bytes(), stream_, 1.0f);
      }
      if (lora) fused_lora_expand(l, *lora, residual);
    } else {
      const GemvQuantAct act = quant_act(x, weight);
      launch_gemv_fused(x, nullptr, weight, nullptr, residual, GemvFusion::kAccumulate, 0.0f,
                        stream_, pdl_, &act, lora ? &l : nullptr);
    }
  });
}

void CudaBackend::scale_columns(const WeightRef& weight, const Tensor& gain) {
  const Tensor& w = weight.dense();
  IB_ASSERT(w.rank == 2 && gain.numel() == w.row_size() && gain.dtype == w.dtype,
            "scale_columns: w (N, K), gain (K) of w's dtype");
  run_op("scale_columns", [&] { launch_scale_columns(w, gain, stream_); });
}

void CudaBackend::set_gemm_m_buckets(int per_octave) {
  gemm_->set_m_buckets(per_octave);
  if (per_octave > 0 && gemm_prewarm_.data() == nullptr && !capturing_) {
    if (Result<Buffer> scratch = alloc(kGemmPrewarmBytes, MemoryTag::kWorkspace); scratch.ok())
      gemm_prewarm_ = std::move(*scratch);
  }
  gemm_->set_prewarm_scratch(gemm_prewarm_.data(), gemm_prewarm_.bytes());
}

int CudaBackend::gemm_m_buckets() const {
  return gemm_->m_buckets();
}

void CudaBackend::set_gemm_tuning(bool on) {
  if (!on) {
    gemm_->set_bucket_tuning(std::nullopt);
    return;
  }
  GemmLt::BucketTuning tuning;
  tuning.time_ms = [this](const std::function<void()>& fn) { return time_ms(fn); };
  tuning.acquire = [this](size_t bytes) -> void* {
    Result<Buffer> scratch = alloc(bytes, MemoryTag::kWorkspace);
    if (!scratch.ok()) return nullptr;  // not tuned: the heuristic's algorithms
    gemm_tune_scratch_ = std::move(*scratch);
    return gemm_tune_scratch_.data();
  };
  tuning.release = [this] { gemm_tune_scratch_.reset(); };
  gemm_->set_bucket_tuning(std::move(tuning));
}

bool CudaBackend::gemm_tuning() const {
  return gemm_->bucket_tuning();
}

float CudaBackend::tune_gemm(const Tensor& x, const Tensor& w, Tensor out,
                             const GemmLt::TimeFn& time_ms) {
  IB_ASSERT(!capturing_, "tune_gemm: not during a graph capture");
  return gemm_->tune(x, w, nullptr, out, gemm_workspace_.data(), gemm_workspace_.bytes(), stream_,
                     time_ms);
}

bool CudaBackend::choose_gemv(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor out) {
  const bool gemv_ok = x.rows() <= kGemvMaxM && gemv_supported(x, w, out) &&
                       (bias == nullptr || bias->dtype == w.dtype);
  const bool rule = gemv_ok && x.rows() <= gemv_max_m_ &&
                    static_cast<int64_t>(w.bytes()) <= gemv_max_weight_bytes_;
  if (!tuning_ || x.rows() > kTuneMaxM || x.rows() == 0) return rule;
  if (rule && x.rows() <= gemv_rule_rows_) return true;  // IB_MATMUL_TUNING=1 or 3
  const auto key = std::make_tuple(x.rows(), w.dim(0), w.dim(1), static_cast<int>(x.dtype),
                                   static_cast<int>(out.dtype), bias != nullptr);
  if (const auto it = gemv_choice_.find(key); it != gemv_choice_.end()) return it->second;
  if (capturing_) return rule;  // no timing inside a capture; the eager warm-up tunes first
  const float lt_ms =
      gemm_->tune(x, w, bias, out, gemm_workspace_.data(), gemm_workspace_.bytes(), stream_,
                  [&](const std::function<void()>& fn) { return time_ms(fn); });
  const float gemv_ms =
      gemv_ok ? time_ms([&] { launch_gemv(x, w, bias, out, stream_); }) : INFINITY;
  return gemv_choice_[key] = gemv_ms < lt_ms;
}

float CudaBackend::time_ms(const std::function<void()>& fn) {
  constexpr int kReps = 5;
  fn();
  fn();
  IB_CUDA_CHECK(cudaEventRecord(tune_begin_, stream_), "matmul tuning");
  for (int i = 0; i < kReps; ++i) fn();
  IB_CUDA_CHECK(cudaEventRecord(tune_end_, stream_), "matmul tuning");
  IB_CUDA_CHECK(cudaEventSynchronize(tune_end_), "matmul tuning");
  float ms = 0.0f;
  IB_CUDA_CHECK(cudaEventElapsedTime(&ms, tune_begin_, tune_end_), "matmul tuning");
  return ms / kReps;
}

void CudaBackend::rope_and_cache(Tensor qkv, const Tensor& positions, const Tensor& slot_mapping,
                                 const Tensor& inv_freq, const KvCacheLayer& kv,
                                 const AttentionShape& shape) {
  IB_ASSERT(qkv.row_size() == int64_t{shape.num_heads + 2 * shape.num_kv_heads} * shape.head_dim,
            "rope_and_cache: qkv must be (T, (Hq + 2 Hkv) * head_dim)");
  IB_ASSERT(positions.numel() == qkv.rows() && slot_mapping.numel() == qkv.rows(),
            "rope_and_cache: positions and slot_mapping must be (T)");
  IB_ASSERT(inv_freq.numel() == shape.head_dim / 2 && inv_freq.dtype == DType::kF32,
            "rope_and_cache: inv_freq must be f32 (head_dim / 2)");
  IB_ASSERT(kv_cache_ok(kv, qkv.dtype) && kv.k.rank == 4 && kv.k.dim(1) == shape.num_kv_heads &&
                kv.k.dim(2) == kv.block_size && kv.k.dim(3) == shape.head_dim,
            "rope_and_cache: cache must be (blocks, Hkv, block_size, head_dim) of qkv's dtype or "
            "fp8_e4m3 (positive scales)");
  run_op("rope_and_cache", [&] {
    launch_rope_and_cache(qkv, positions, slot_mapping, inv_freq, kv, shape, stream_, pdl_);
  });
}

void CudaBackend::attention(const Tensor& qkv, const KvCacheLayer& kv,
                            const AttentionMetadata& meta, const AttentionShape& shape,
                            Tensor out) {
  IB_ASSERT(shape.num_kv_heads > 0 && shape.num_heads % shape.num_kv_heads == 0,
            "attention: num_heads must be a multiple of num_kv_heads");
  IB_ASSERT(qkv.rows() == meta.num_tokens && out.rows() == meta.num_tokens &&
                out.row_size() == int64_t{shape.num_heads} * shape.head_dim &&
                out.dtype == qkv.dtype,
            "attention: qkv (T, ...) and out (T, Hq * head_dim) must match the metadata");
  IB_ASSERT(meta.max_query_len >= 1 && meta.max_context_len >= 1,
            "attention: max_query_len / max_context_len hints must be upper bounds (>= 1)");
  IB_ASSERT(split_kv_supports(shape), "attention: head_dim must be 64, 96, 128 or 256 on CUDA");
  IB_ASSERT(kv_cache_ok(kv, qkv.dtype), "attention: the cache must be qkv's dtype or fp8_e4m3");
  // o's operands recorded for this attention (IB_LORA_ATTN; lora_before_attention): taken by a
  // whole decode batch whose output is o's input, and spent either way.
  const AttnLoraPending lora = std::exchange(attn_lora_pending_, AttnLoraPending{});
  run_op("attention", [&] {
    const bool flash = flash_supports(qkv.dtype, shape) &&
                       (attention_path_ == AttentionPath::kFlash ||
                        (attention_path_ == AttentionPath::kAuto && meta.max_query_len > 1));
    if (!flash) {
      const bool take = lora.armed && lora.a == out.data && lora.rows == out.rows();
      decode_attention(qkv, kv, meta, shape, out, take ? &lora : nullptr);
      return;
    }
    // A mixed batch's leading one-token sequences (IB_ATTN_MIXED): the flash kernel would give
    // each a block of 64 query rows per query head, one of them used.
    const int d = meta.decode_prefix;
    if (attention_path_ == AttentionPath::kAuto && attention_mixed_min_seqs_ > 0 &&
        d >= attention_mixed_min_seqs_ && d < meta.num_seqs) {
      AttentionMetadata decodes = sequence_range(meta, 0, d);  // token offsets 0 .. d
      decodes.num_tokens = d;
      decodes.max_query_len = 1;
      decode_attention(qkv.slice_rows(0, d), kv, decodes, shape, out.slice_rows(0, d));
      AttentionMetadata chunks = sequence_range(meta, d, meta.num_seqs - d);
      chunks.num_tokens = meta.num_tokens - d;
      launch_attention_flash(qkv, kv, chunks, shape, out, stream_);
      ++attention_mixed_launches_;
      return;
    }
    launch_attention_flash(qkv, kv, meta, shape, out, stream_);
  });
}

// A decode batch (max_query_len 1, or the path forced off flash): the tensor-core kernel from
// IB_ATTN_MMA sequences, else split-KV.
void CudaBackend::decode_attention(const Tensor& qkv, const KvCacheLayer& kv,
                                   const AttentionMetadata& meta, const AttentionShape& shape,
                                   Tensor out, const AttnLoraPending* lora) {
  const bool mma = attention_path_ == AttentionPath::kAuto && attention_mma_min_seqs_ > 0 &&
                   meta.max_query_len == 1 && meta.num_seqs >= attention_mma_min_seqs_ &&
                   decode_mma_supports(qkv.dtype, kv, shape);
  if (mma) {
    launch_attention_decode_mma(qkv, kv, meta, shape, out, stream_, attention_e4m3_f16_,
                                attention_mma_blocks_);
    ++attention_mma_launches_;
    return;
  }
  const int partition =
      split_kv_partition_size(meta, shape, attention_workspace_.bytes(), num_sms_);
  const SplitKvRan ran = launch_attention_split_kv(
      qkv, kv, meta, shape, partition, attention_workspace_.data(), attention_workspace_.bytes(),
      static_cast<unsigned*>(attention_counters_.data()),
      attention_counters_.bytes() / sizeof(unsigned), num_sms_, out, stream_, pdl_,
      meta.num_seqs <= attention_prefetch_max_seqs_,
      pdl_attention_trigger_early_ || (pdl_attention_early_w8a8_ && w8a8_weights_), attention_lean_,
      lora != nullptr ? &lora->params : nullptr);
  if (ran.lean) ++attention_lean_launches_;
  if (ran.lora) {  // o's op takes its shrink and the next op's from here (take_attention_lora)
    attn_lora_pending_ = *lora;
    attn_lora_pending_.done = true;
    ++attn_lora_launches_;
  }
}

void CudaBackend::gelu_tanh_mul(const Tensor& gate_up, Tensor out) {
  IB_ASSERT(gate_up.dtype == out.dtype && gate_up.row_size() == 2 * out.row_size() &&
                gate_up.rows() == out.rows(),
            "gelu_tanh_mul: gate_up must be (T, 2F) for out (T, F)");
  run_op("gelu_tanh_mul", [&] { launch_gelu_tanh_mul(gate_up, out, stream_); });
}

void CudaBackend::affine(Tensor x, float mul, float add) {
  run_op("affine", [&] { launch_affine_softcap(x, mul, add, 0.0f, stream_); });
}

void CudaBackend::softcap(Tensor x, float cap) {
  IB_ASSERT(cap > 0, "softcap: the cap must be positive");
  run_op("softcap", [&] { launch_affine_softcap(x, 1.0f, 0.0f, cap, stream_); });
}

void CudaBackend::silu_mul(const Tensor& gate_up, Tensor out) {
  IB_ASSERT(gate_up.rows() == out.rows() && gate_up.row_size() == 2 * out.row_size() &&
                gate_up.dtype == out.dtype,
            "silu_mul: gate_up must be (T, 2F) for out (T, F)");
  run_op("silu_mul", [&] { launch_silu_mul(gate_up, out, stream_, pdl_); });
}

void CudaBackend::gather_rows(const Tensor& x, const Tensor& row_ids, Tensor out) {
  IB_ASSERT(row_ids.dtype == DType::kI32 && row_ids.numel() == out.rows() &&
                x.row_size() == out.row_size() && x.dtype == out.dtype,
            "gather_rows: out (R, D) = x[row_ids (R)] with matching D and dtype");
  run_op("gather_rows", [&] { launch_gather_rows(x, row_ids, out, stream_, pdl_); });
}

void CudaBackend::sample(const Tensor& logits, const SamplingMetadata& meta, Tensor out_tokens) {
  IB_ASSERT(logits.dtype == DType::kF32 && logits.rows() == meta.num_rows &&
                out_tokens.dtype == DType::kI32 && out_tokens.numel() == meta.num_rows,
            "sample: logits f32 (R, V) and out_tokens int32 (R)");
  run_op("sample", [&] {
    launch_sample(logits, meta, out_tokens, attention_workspace_.data(),
                  attention_workspace_.bytes(), stream_, pdl_);
  });
}

void CudaBackend::copy_on_device(Tensor dst, const Tensor& src) {
  IB_ASSERT(dst.dtype == src.dtype && dst.numel() == src.numel(),
            "copy_on_device: dst and src must have the same dtype and element count");
  if (dst.numel() == 0) return;
  run_op("copy_on_device", [&] {
    IB_CUDA_CHECK(
        cudaMemcpyAsync(dst.data, src.data, src.bytes(), cudaMemcpyDeviceToDevice, stream_),
        "copy_on_device");
  });
}

}  // namespace cuda
}  // namespace ib
