// The CPU communicator: the ranks of a tensor-parallel group as threads of one process, their
// collectives over shared memory (host tensors), so TP = 2 and 4 run and are tested without GPUs.
#pragma once

#include <memory>
#include <vector>

#include "backend/communicator.h"

namespace ib {

// One communicator per rank of a new group of `ranks` (>= 1); hand rank r's to the thread that
// drives rank r. The group lives as long as any of them. Sums run in rank order, so every rank
// gets bit-identical results.
std::vector<std::unique_ptr<Communicator>> make_cpu_communicators(int ranks);

}  // namespace ib
