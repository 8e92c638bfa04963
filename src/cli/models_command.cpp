#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cli/commands.h"
#include "engine/model_weights.h"

namespace ib {
namespace {

std::string params_text(int64_t n) {
  const double x = static_cast<double>(n);
  if (x >= 1e9) return fmt::format("{:.2f}B", x / 1e9);
  return fmt::format("{:.1f}M", x / 1e6);
}

double gib(double bytes) {
  return bytes / (1024.0 * 1024.0 * 1024.0);
}

}  // namespace

std::string models_table(const std::vector<ModelConfig>& models) {
  std::string out =
      "| name | family | params | GiB fp32 | GiB bf16 | GiB fp8 / int8 | GiB int4 (est.) "
      "| KV KiB/token bf16 | max ctx | runs |\n"
      "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |\n";
  for (const auto& m : models) {
    const double params = static_cast<double>(m.parameter_count());
    // fp8 / int8: what --quantization fp8, int8 and int8-w8a8 allocate, the same bytes (matmul
    // weights 1 byte per element plus fp32 per-channel scales; embeddings, lm_head, norms and
    // biases bf16). int4: half a byte per
    // parameter, no scales, until issue 14's formats exist.
    // A model the engine cannot run (mixture-of-experts, ...) has no allocation to report.
    const auto unsupported = m.unsupported_features();
    const std::string fp8 =
        unsupported.empty() ? fmt::format("{:.2f}", gib(static_cast<double>(planned_weight_bytes(
                                                        m, DType::kBF16, WeightFormat::kFp8E4M3))))
                            : std::string("-");
    out += fmt::format(
        "| {} | {} | {} | {:.2f} | {:.2f} | {} | {:.2f} | {:g} | {} | {} |\n", m.name, m.family,
        params_text(m.parameter_count()), gib(params * 4), gib(params * 2), fp8, gib(params / 2),
        static_cast<double>(m.kv_bytes_per_token(DType::kBF16)) / 1024.0, m.max_position_embeddings,
        unsupported.empty() ? std::string("yes")
                            : fmt::format("no: {}", fmt::join(unsupported, ", ")));
  }
  return out;
}

}  // namespace ib
