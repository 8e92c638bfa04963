#include "backend/cuda/nccl_communicator.h"

#include <nccl.h>

#include <cstdlib>
#include <string>
#include <utility>

namespace ib::cuda {
namespace {

Result<ncclDataType_t> nccl_type(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return ncclFloat32;
    case DType::kBF16:
      return ncclBfloat16;
    case DType::kF16:
      return ncclFloat16;
    default:
      return Error{ErrorKind::kInternal, "tensor parallel: NCCL sums fp32, bf16 or fp16, not " +
                                             std::string(dtype_name(dtype))};
  }
}

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(ncclComm_t comm, NcclRank rank, int index, int size)
      : comm_(comm), rank_(rank), index_(index), size_(size) {}
  ~NcclCommunicator() override {
    cudaSetDevice(rank_.device);
    if (scratch_ != nullptr) cudaFree(scratch_);
    if (!aborted_) ncclCommDestroy(comm_);
  }

  int rank() const override { return index_; }
  int size() const override { return size_; }
  std::string describe() const override {
    return "nccl " + nccl_version() + ", " + std::to_string(size_) +
           (size_ == 1 ? " rank" : " ranks");
  }

  Status all_reduce_sum(Tensor inout) override {
    IB_TRY(usable("all_reduce_sum"));
    IB_ASSIGN_OR_RETURN(const ncclDataType_t type, nccl_type(inout.dtype));
    return check("all_reduce_sum",
                 ncclAllReduce(inout.data, inout.data, static_cast<size_t>(inout.numel()), type,
                               ncclSum, comm_, rank_.stream));
  }

  Status all_gather_columns(const Tensor& local, Tensor out) override {
    IB_TRY(usable("all_gather_columns"));
    IB_ASSIGN_OR_RETURN(const ncclDataType_t type, nccl_type(local.dtype));
    const int64_t rows = local.rows(), cols = local.row_size();
    if (out.dtype != local.dtype || out.rows() != rows || out.row_size() != cols * size_)
      return Error{ErrorKind::kInternal,
                   "tensor parallel all_gather_columns: the output is not (rows, cols x ranks) of "
                   "the input's dtype"};
    const size_t es = dtype_size(local.dtype);
    const size_t block = static_cast<size_t>(rows * cols) * es;
    if (size_ == 1 || rows == 1) {  // rank-major is the columns' layout already
      return check("all_gather_columns",
                   ncclAllGather(local.data, out.data, static_cast<size_t>(rows * cols), type,
                                 comm_, rank_.stream));
    }
    IB_TRY(reserve(block * static_cast<size_t>(size_)));
    IB_TRY(check("all_gather_columns",
                 ncclAllGather(local.data, scratch_, static_cast<size_t>(rows * cols), type, comm_,
                               rank_.stream)));
    // (ranks, rows, cols) -> (rows, ranks x cols): each rank's block into its columns.
    for (int r = 0; r < size_; ++r) {
      const cudaError_t err =
          cudaMemcpy2DAsync(static_cast<char*>(out.data) + static_cast<size_t>(r * cols) * es,
                            static_cast<size_t>(size_ * cols) * es,
                            static_cast<const char*>(scratch_) + static_cast<size_t>(r) * block,
                            static_cast<size_t>(cols) * es, static_cast<size_t>(cols) * es,
                            static_cast<size_t>(rows), cudaMemcpyDeviceToDevice, rank_.stream);
      if (err != cudaSuccess)
        return runtime_error(std::string("tensor parallel all_gather_columns: ") +
                             cudaGetErrorString(err));
    }
    return Ok{};
  }

  void attach_thread() override { cudaSetDevice(rank_.device); }

  void abort(const std::string& reason) override {
    if (aborted_) return;
    aborted_ = true;
    reason_ = reason;
    ncclCommAbort(comm_);
  }

 private:
  Status usable(const char* op) const {
    if (aborted_)
      return runtime_error(std::string("tensor parallel ") + op +
                           ": the group was aborted by a rank: " + reason_);
    if (cudaSetDevice(rank_.device) != cudaSuccess)
      return runtime_error(std::string("tensor parallel ") + op + ": cudaSetDevice(" +
                           std::to_string(rank_.device) + ") failed");
    return Ok{};
  }

  Status check(const char* op, ncclResult_t result) {
    if (result == ncclSuccess) return Ok{};
    const char* detail = ncclGetLastError(comm_);
    const std::string last = detail != nullptr ? detail : "";
    return runtime_error(std::string("tensor parallel ") + op + ": NCCL: " +
                         ncclGetErrorString(result) + (last.empty() ? "" : " (" + last + ")"));
  }

  Status reserve(size_t bytes) {
    if (bytes <= scratch_bytes_) return Ok{};
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    cudaStreamIsCapturing(rank_.stream, &capture);
    if (capture != cudaStreamCaptureStatusNone)
      return Error{ErrorKind::kInternal,
                   "tensor parallel all_gather_columns: a captured step gathers more rows than "
                   "the eager steps before it"};
    if (scratch_ != nullptr) cudaFree(scratch_);
    scratch_ = nullptr;
    scratch_bytes_ = 0;
    if (cudaMalloc(&scratch_, bytes) != cudaSuccess)
      return runtime_error("tensor parallel all_gather_columns: out of device memory for " +
                           std::to_string(bytes) + " bytes of gather scratch");
    scratch_bytes_ = bytes;
    return Ok{};
  }

  ncclComm_t comm_;
  NcclRank rank_;
  int index_;
  int size_;
  bool aborted_ = false;
  std::string reason_;
  void* scratch_ = nullptr;  // (size, rows, cols) of the last gather's dtype
  size_t scratch_bytes_ = 0;
};

}  // namespace

std::string nccl_version() {
  int v = 0;
  ncclGetVersion(&v);
  // NCCL_VERSION_CODE: major * 10000 + minor * 100 + patch (since 2.9).
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." +
         std::to_string(v % 100);
}

Result<std::vector<std::unique_ptr<Communicator>>> make_nccl_communicators(
    const std::vector<NcclRank>& ranks) {
  IB_ASSERT(!ranks.empty(), "an NCCL group needs at least one rank");
  ::setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/0);
  std::vector<int> devices;
  for (const NcclRank& r : ranks) devices.push_back(r.device);
  std::vector<ncclComm_t> comms(ranks.size());
  const ncclResult_t result =
      ncclCommInitAll(comms.data(), static_cast<int>(ranks.size()), devices.data());
  if (result != ncclSuccess)
    return runtime_error(std::string("tensor parallel: ncclCommInitAll over ") +
                         std::to_string(ranks.size()) + " GPUs: " + ncclGetErrorString(result));
  std::vector<std::unique_ptr<Communicator>> out;
  for (size_t r = 0; r < ranks.size(); ++r)
    out.push_back(std::make_unique<NcclCommunicator>(comms[r], ranks[r], static_cast<int>(r),
                                                     static_cast<int>(ranks.size())));
  return out;
}

}  // namespace ib::cuda
