// Sampling of one row of logits, exactly as SamplingMetadata documents. Probabilities are
// accumulated in double on the CPU (the reference); candidates are ordered by descending logit,
// ties by ascending token id.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "backend/cpu/detail/kernels.h"
#include "core/rng.h"

namespace ib::cpu {

int32_t sample_row(const float* logits, int64_t vocab, const SampleParams& params) {
  IB_ASSERT(vocab > 0, "sample: empty vocabulary");
  if (params.temperature <= 0.0f) {
    int64_t best = 0;
    for (int64_t i = 1; i < vocab; ++i) {
      if (logits[i] > logits[best]) best = i;
    }
    return static_cast<int32_t>(best);
  }
  std::vector<float> scaled(static_cast<size_t>(vocab));  // (vocab)
  for (int64_t i = 0; i < vocab; ++i) {
    scaled[static_cast<size_t>(i)] = logits[i] / params.temperature;
  }
  std::vector<int32_t> order(static_cast<size_t>(vocab));  // token ids, most likely first
  std::iota(order.begin(), order.end(), 0);
  auto before = [&](int32_t a, int32_t b) {
    const float la = scaled[static_cast<size_t>(a)];
    const float lb = scaled[static_cast<size_t>(b)];
    return la > lb || (la == lb && a < b);
  };
  const int64_t kept = params.top_k > 0 ? std::min<int64_t>(params.top_k, vocab) : vocab;
  std::partial_sort(order.begin(), order.begin() + kept, order.end(), before);

  // Unnormalised probabilities exp(l - max) and their running sums, in candidate order.
  const double max_logit = scaled[static_cast<size_t>(order[0])];
  std::vector<double> cumulative(static_cast<size_t>(kept));  // (kept)
  double total = 0.0;
  for (int64_t i = 0; i < kept; ++i) {
    total +=
        std::exp(static_cast<double>(scaled[static_cast<size_t>(order[static_cast<size_t>(i)])]) -
                 max_logit);
    cumulative[static_cast<size_t>(i)] = total;
  }
  // Top-p: the shortest prefix whose mass reaches top_p.
  int64_t nucleus = kept;
  if (params.top_p < 1.0f) {
    const double threshold = static_cast<double>(params.top_p) * total;
    nucleus = 1;
    while (nucleus < kept && cumulative[static_cast<size_t>(nucleus - 1)] < threshold) ++nucleus;
  }
  // Inverse CDF: the first candidate whose cumulative mass exceeds u * (nucleus mass).
  const double u = counter_uniform(params.seed, 0, static_cast<uint64_t>(params.step));
  const double target = u * cumulative[static_cast<size_t>(nucleus - 1)];
  for (int64_t i = 0; i < nucleus; ++i) {
    if (cumulative[static_cast<size_t>(i)] > target) return order[static_cast<size_t>(i)];
  }
  return order[static_cast<size_t>(nucleus - 1)];
}

}  // namespace ib::cpu
