// --lora-assignment: uniform, round-robin or Zipf choices of an adapter per request.
#include "workload/lora_assignment.h"

#include <cmath>
#include <cstdlib>

#include "core/rng.h"

namespace ib {

Result<LoraAssignment> parse_lora_assignment(const std::string& text) {
  LoraAssignment a;
  if (text == "random") return a;
  if (text == "round-robin") {
    a.kind = LoraAssignment::Kind::kRoundRobin;
    return a;
  }
  if (text.rfind("zipf:", 0) == 0) {
    const std::string s = text.substr(5);
    char* end = nullptr;
    const double v = std::strtod(s.c_str(), &end);
    if (!s.empty() && end == s.c_str() + s.size() && v > 0 && std::isfinite(v)) {
      a.kind = LoraAssignment::Kind::kZipf;
      a.zipf_s = v;
      return a;
    }
  }
  return user_error("--lora-assignment " + text +
                    ": use random (vLLM bench's uniform choice per request), round-robin, or "
                    "zipf:S with S > 0 (e.g. zipf:1.1)");
}

std::vector<std::string> assign_lora_adapters(int num_requests,
                                              const std::vector<std::string>& names,
                                              const LoraAssignment& assignment, uint64_t seed) {
  std::vector<std::string> out;
  if (names.empty()) return out;
  const auto n = static_cast<int64_t>(names.size());
  std::vector<double> cdf;  // Zipf: cumulative weights 1 / k^S
  if (assignment.kind == LoraAssignment::Kind::kZipf) {
    double total = 0;
    for (int64_t k = 1; k <= n; ++k)
      cdf.push_back(total += std::pow(double(k), -assignment.zipf_s));
    for (double& c : cdf) c /= total;
  }
  Rng rng(seed ^ 0x4c6f5241ULL);  // "LoRA": a stream of its own, apart from the prompts'
  for (int i = 0; i < num_requests; ++i) {
    int64_t k = 0;
    switch (assignment.kind) {
      case LoraAssignment::Kind::kRandom:
        k = rng.uniform_int(0, n - 1);
        break;
      case LoraAssignment::Kind::kRoundRobin:
        k = i % n;
        break;
      case LoraAssignment::Kind::kZipf: {
        const double u = rng.uniform();
        while (k + 1 < n && cdf[static_cast<size_t>(k)] <= u) ++k;
        break;
      }
    }
    out.push_back(names[static_cast<size_t>(k)]);
  }
  return out;
}

}  // namespace ib
