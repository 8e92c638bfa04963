#include <fmt/format.h>
#include <fmt/ranges.h>

#include "backend/cuda_attention_sizes.h"
#include "cli/commands.h"
#include "engine/model_weights.h"
#include "engine/moe_support.h"

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
      "| name | family | params | GiB fp32 | GiB bf16 | GiB fp8 / int8 | GiB awq / gptq "
      "| GiB nf4 | GiB gguf Q4_K_M | KV KiB/token bf16 | max ctx | runs |\n"
      "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |\n";
  for (const auto& m : models) {
    const double params = static_cast<double>(m.parameter_count());
    // What --quantization allocates (planned_weight_bytes): fp8 / int8 (fp8, int8 and int8-w8a8
    // allocate the same bytes: matmul weights 1 byte per element plus fp32 per-channel scales),
    // awq / gptq (half a byte per element, f16 scales and u8 zero points per group of 128) and
    // nf4 (half a byte, an f32 absmax per block of 64); embeddings, lm_head, norms and biases
    // bf16. A model the engine cannot run (MLA, soft-capping, ...), a mixture-of-experts model
    // whose experts run dense only (DeepSeek-V2), or one whose sizes the groups do not tile, has
    // no allocation to report. Mixtral's experts take the format too (on the CPU backend).
    const auto unsupported = m.unsupported_features();
    auto gib_of = [&](WeightFormat format) {
      if (!unsupported.empty()) return std::string("-");
      if (!check_moe_quantization(m, format).ok()) return std::string("-");
      if (is_4bit(format)) {
        const int64_t group = load_time_layout(format, false).group_size;
        if (m.hidden_size % group != 0 || m.intermediate_size % group != 0 ||
            (int64_t{m.num_heads} * m.head_dim) % group != 0 ||
            m.moe.expert_intermediate_size % group != 0)
          return std::string("-");
      }
      return fmt::format("{:.2f}",
                         gib(static_cast<double>(planned_weight_bytes(m, DType::kBF16, format))));
    };
    // gguf: the dummy Q4_K_M mix (--load-format dummy --quantization gguf), as allocated (matmul
    // rows padded to 16 bytes; embedding and lm_head bf16); "-" where its blocks do not tile.
    const auto q4_k_m = gguf_q4_k_m_layout(m);
    const std::string gguf =
        !unsupported.empty() || !q4_k_m.ok()
            ? std::string("-")
            : fmt::format("{:.2f}",
                          gib(static_cast<double>(planned_weight_bytes(m, DType::kBF16, *q4_k_m))));
    out += fmt::format("| {} | {} | {} | {:.2f} | {:.2f} | {} | {} | {} | {} | {:g} | {} | {} |\n",
                       m.name, m.family, params_text(m.parameter_count()), gib(params * 4),
                       gib(params * 2), gib_of(WeightFormat::kFp8E4M3),
                       gib_of(WeightFormat::kInt4W4A16), gib_of(WeightFormat::kNf4), gguf,
                       static_cast<double>(m.kv_bytes_per_token(DType::kBF16)) / 1024.0,
                       m.max_position_embeddings,
                       !unsupported.empty() ? fmt::format("no: {}", fmt::join(unsupported, ", "))
                       // multi-head latent attention: its own CUDA kernels (backend/cuda/mla.cu)
                       : m.mla.kv_lora_rank > 0 ? std::string("yes")
                       : !cuda_attention_supports_head_dim(m.head_dim)
                           ? fmt::format("yes, on the CPU (head_dim {}: the CUDA attention "
                                         "kernels take {})",
                                         m.head_dim, kCudaAttentionHeadDimsText)
                           : std::string("yes"));
  }
  return out;
}

}  // namespace ib
