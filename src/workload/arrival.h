// Open-loop arrival schedules, as `vllm bench serve` draws them: inter-arrival gaps from
// Gamma(shape = burstiness, scale = 1 / (rate * burstiness)) (mean 1/rate; burstiness 1 is a
// Poisson process, larger is more regular), accumulated, then rescaled so the last arrival lands at
// num_requests / rate, which keeps the offered load equal across seeds.
#pragma once

#include <cstdint>
#include <vector>

#include "core/result.h"

namespace ib {

// User errors for a non-positive rate or burstiness (an infinite rate is allowed).
Status validate_arrival(double request_rate, double burstiness);

// Offsets from the start of a run, in ns, one per request, non-decreasing. An infinite rate
// schedules everything at 0. Deterministic for a seed.
std::vector<int64_t> arrival_offsets_ns(int num_requests, double request_rate, double burstiness,
                                        uint64_t seed);

}  // namespace ib
