// Communicator: the collectives tensor parallelism needs (issue 19) across a group of ranks, one
// device each: the sum after a row-split matmul (attention's o, the MLP's down) and the gather of
// a vocabulary-split LM head's logits. Implementations: CPU threads over shared memory
// (cpu/cpu_communicator.h), so the whole TP path runs in CI; NCCL for CUDA devices.
//
// Contract: every rank of a group calls the same collectives in the same order, with tensors of
// the same dtype and shape, each rank from the one thread that drives its device. A call returns
// when the rank's own output is complete; inputs may be reused after it returns. Results are the
// same on every rank. A rank that fails calls abort(reason); from then on every rank's pending
// and later calls return an error naming the collective and the reason, instead of waiting for
// a rank that will not come.
#pragma once

#include <string>

#include "backend/tensor.h"
#include "core/result.h"

namespace ib {

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;  // 0 .. size() - 1
  virtual int size() const = 0;  // ranks in the group
  // For result.json and errors: "cpu threads, 2 ranks", "nccl 2.21.5, 2 ranks".
  virtual std::string describe() const = 0;

  // inout: any shape, fp32, bf16 or fp16; on return it holds the element-wise sum over the ranks
  // (the CPU sums in rank order, bf16 / fp16 in fp32 rounded once; NCCL in its own order and
  // precision, so TP results agree with TP = 1 within the dtype's tolerance, not bit for bit).
  virtual Status all_reduce_sum(Tensor inout) = 0;

  // local: (rows, cols) on every rank; out: (rows, cols * size()) of local's dtype, rank r's
  // columns at [r * cols, (r + 1) * cols) — the logits of an LM head split by vocabulary.
  virtual Status all_gather_columns(const Tensor& local, Tensor out) = 0;

  // Once, on the thread that will drive this rank, before its first collective or op: what the
  // thread needs (NCCL: the rank's device made current). The CPU's needs nothing.
  virtual void attach_thread() {}

  // Ends the group: every pending and later collective on every rank returns an error naming
  // reason. Safe to call from any rank's thread, more than once (the first reason is kept).
  virtual void abort(const std::string& reason) = 0;
};

}  // namespace ib
