#include "runner/records.h"

namespace ib {

double RequestRecord::tpot_ms() const {
  if (n_out <= 1) return 0.0;
  return static_cast<double>(t_end_ns - t_first_ns) / 1e6 / static_cast<double>(n_out - 1);
}

void add_chunk(RequestRecord& record, int num_tokens, int64_t time_ns) {
  if (num_tokens <= 0) return;
  ++record.chunks;
  if (record.token_times_ns.empty()) {
    record.t_first_ns = time_ns;
    record.token_times_ns.assign(static_cast<size_t>(num_tokens), time_ns);
    return;
  }
  const int64_t prev = record.token_times_ns.back();
  const int64_t gap = time_ns - prev;
  for (int j = 1; j <= num_tokens; ++j) {
    record.token_times_ns.push_back(prev + gap * j / num_tokens);
  }
}

}  // namespace ib
