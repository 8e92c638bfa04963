#include "backend/cpu/cpu_communicator.h"

#include <condition_variable>
#include <cstring>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "backend/cpu/detail/float_elements.h"
#include "core/dtype.h"

namespace ib {
namespace {

// What a rank brought to a collective: checked against every other rank's after the first
// barrier, so that a mismatch is reported by every rank alike instead of leaving some waiting.
struct Contribution {
  const void* data = nullptr;
  DType dtype = DType::kF32;
  int64_t rows = 0;
  int64_t cols = 0;
  std::string problem;  // this rank's own arguments are wrong: why ("" when fine)
};

std::string shape_text(DType dtype, int64_t rows, int64_t cols) {
  return std::string(dtype_name(dtype)) + " (" + std::to_string(rows) + ", " +
         std::to_string(cols) + ")";
}
std::string shape_text(const Contribution& c) {
  return shape_text(c.dtype, c.rows, c.cols);
}

// The state the ranks of one group share: a reusable barrier (generation-counted), each rank's
// contribution to the collective in progress, and the abort reason.
class Group {
 public:
  explicit Group(int size) : size_(size), slots_(static_cast<size_t>(size)) {}

  int size() const { return size_; }
  Contribution& slot(int rank) { return slots_[static_cast<size_t>(rank)]; }

  // Returns when every rank has arrived; an error once the group is aborted.
  Status barrier(const char* op) {
    std::unique_lock<std::mutex> lock(mu_);
    if (aborted_) return aborted_error(op);
    const uint64_t generation = generation_;
    if (++arrived_ == size_) {
      arrived_ = 0;
      ++generation_;
      cv_.notify_all();
      return Ok{};
    }
    cv_.wait(lock, [&] { return generation_ != generation || aborted_; });
    if (generation_ != generation) return Ok{};
    return aborted_error(op);
  }

  void abort(const std::string& reason) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!aborted_) reason_ = reason;
    aborted_ = true;
    cv_.notify_all();
  }

 private:
  Error aborted_error(const char* op) const {
    return runtime_error(std::string("tensor parallel ") + op +
                         ": the group was aborted by a rank: " + reason_);
  }

  const int size_;
  std::vector<Contribution> slots_;
  std::mutex mu_;
  std::condition_variable cv_;
  int arrived_ = 0;
  uint64_t generation_ = 0;
  bool aborted_ = false;
  std::string reason_;
};

class CpuCommunicator final : public Communicator {
 public:
  CpuCommunicator(std::shared_ptr<Group> group, int rank) : group_(std::move(group)), rank_(rank) {}

  int rank() const override { return rank_; }
  int size() const override { return group_->size(); }
  std::string describe() const override {
    return "cpu threads, " + std::to_string(size()) + (size() == 1 ? " rank" : " ranks");
  }

  Status all_reduce_sum(Tensor inout) override {
    const char* op = "all_reduce_sum";
    Contribution& mine = group_->slot(rank_);
    mine = Contribution{inout.data, inout.dtype, inout.rows(), inout.row_size(), ""};
    if (!cpu::is_float(inout.dtype))
      mine.problem = "its tensor is " + std::string(dtype_name(inout.dtype)) +
                     " (the sum takes fp32, bf16 or fp16)";
    IB_TRY(group_->barrier(op));
    IB_TRY(settle(op, check_alike(op)));
    // Every rank sums all ranks' inputs in rank order into its own scratch, then (once no rank
    // reads the inputs any more) writes it back: the same values on every rank.
    const int64_t n = mine.rows * mine.cols;
    sum_.assign(static_cast<size_t>(n), 0.0f);
    for (int r = 0; r < size(); ++r) {
      const Contribution& c = group_->slot(r);
      for (int64_t i = 0; i < n; ++i)
        sum_[static_cast<size_t>(i)] += cpu::load_as_f32(c.data, c.dtype, i);
    }
    IB_TRY(group_->barrier(op));
    for (int64_t i = 0; i < n; ++i)
      cpu::store_from_f32(inout.data, inout.dtype, i, sum_[static_cast<size_t>(i)]);
    return Ok{};
  }

  Status all_gather_columns(const Tensor& local, Tensor out) override {
    const char* op = "all_gather_columns";
    Contribution& mine = group_->slot(rank_);
    mine = Contribution{local.data, local.dtype, local.rows(), local.row_size(), ""};
    if (out.dtype != local.dtype || out.rows() != local.rows() ||
        out.row_size() != local.row_size() * size())
      mine.problem = "its output is " + shape_text(out.dtype, out.rows(), out.row_size()) +
                     ", not " + shape_text(local.dtype, local.rows(), local.row_size() * size());
    IB_TRY(group_->barrier(op));
    IB_TRY(settle(op, check_alike(op)));
    const size_t row_bytes = static_cast<size_t>(mine.cols) * dtype_size(mine.dtype);
    for (int r = 0; r < size(); ++r) {
      const auto* src = static_cast<const char*>(group_->slot(r).data);
      for (int64_t row = 0; row < mine.rows; ++row)
        std::memcpy(
            static_cast<char*>(out.data) + (static_cast<size_t>(row) * size() + r) * row_bytes,
            src + static_cast<size_t>(row) * row_bytes, row_bytes);
    }
    // No rank may change its input before every rank has copied it.
    return group_->barrier(op);
  }

  void abort(const std::string& reason) override { group_->abort(reason); }

 private:
  // A failed check ends the collective on every rank alike (they all see the same slots), but
  // only after a barrier: no rank may reuse its slot while another still reads it.
  Status settle(const char* op, Status alike) {
    if (alike.ok()) return alike;
    (void)group_->barrier(op);
    return alike;
  }

  // Every rank runs this on the same contributions and so returns the same answer.
  Status check_alike(const char* op) const {
    const Contribution& first = group_->slot(0);
    for (int r = 0; r < size(); ++r) {
      const Contribution& c = group_->slot(r);
      if (!c.problem.empty())
        return Error{ErrorKind::kInternal, std::string("tensor parallel ") + op + ": rank " +
                                               std::to_string(r) + ": " + c.problem};
      if (c.dtype != first.dtype || c.rows != first.rows || c.cols != first.cols)
        return Error{ErrorKind::kInternal, std::string("tensor parallel ") + op + ": rank " +
                                               std::to_string(r) + " passed " + shape_text(c) +
                                               ", rank 0 " + shape_text(first) +
                                               " (every rank must pass the same dtype and shape)"};
    }
    return Ok{};
  }

  std::shared_ptr<Group> group_;
  const int rank_;
  std::vector<float> sum_;  // (rows * cols): this rank's sum before it is written back
};

}  // namespace

std::vector<std::unique_ptr<Communicator>> make_cpu_communicators(int ranks) {
  IB_ASSERT(ranks >= 1, "a communicator group needs at least one rank");
  auto group = std::make_shared<Group>(ranks);
  std::vector<std::unique_ptr<Communicator>> out;
  for (int r = 0; r < ranks; ++r) out.push_back(std::make_unique<CpuCommunicator>(group, r));
  return out;
}

}  // namespace ib
