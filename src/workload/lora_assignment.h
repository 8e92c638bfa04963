// --lora-assignment: which LoRA adapter each request of a benchmark asks for, as vLLM's
// `bench serve --lora-modules` does it (a uniform random choice per request), or round-robin,
// or Zipf-skewed (a few hot adapters, a long tail). Deterministic for a seed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/result.h"

namespace ib {

// random (uniform per request), round-robin (request i gets names[i % n]) or zipf:S (adapter k,
// 1-based in the order given, with probability proportional to 1 / k^S, S > 0). A user error
// naming the flag otherwise.
struct LoraAssignment {
  enum class Kind { kRandom, kRoundRobin, kZipf } kind = Kind::kRandom;
  double zipf_s = 1.0;
};
Result<LoraAssignment> parse_lora_assignment(const std::string& text);

// The adapter name of each of num_requests requests, from names (non-empty).
std::vector<std::string> assign_lora_adapters(int num_requests,
                                              const std::vector<std::string>& names,
                                              const LoraAssignment& assignment, uint64_t seed);

}  // namespace ib
