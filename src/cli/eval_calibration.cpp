// `inferbench eval --calibration`: the candidate's calibration prompts, drawn and checked as
// `run` draws them from its dataset (workload/workload.h), and their record in the JSON.
#include <fmt/format.h>

#include "cli/detail/eval.h"
#include "model/tokenizer.h"
#include "workload/workload.h"

namespace ib::detail {

Result<std::optional<EvalCalibration>> eval_calibration(const EvalFlags& f,
                                                        const ModelConfig& model) {
  IB_ASSIGN_OR_RETURN(const std::optional<ResolvedCalibration> resolved,
                      resolve_calibration(f, f.quantization));
  if (!resolved) return std::optional<EvalCalibration>{};
  if (f.dataset_path.empty()) {
    return user_error(fmt::format(
        "--calibration {} calibrates on a dataset's prompts: add --dataset-path FILE (JSONL, as "
        "run's --dataset-name jsonl takes)",
        f.calibration));
  }
  WorkloadOptions w;
  w.dataset_name = "jsonl";
  w.dataset_path = f.dataset_path;
  w.num_prompts = resolved->prompts;
  w.vocab_size = model.vocab_size;
  EvalCalibration c{resolved->options, {}};
  IB_ASSIGN_OR_RETURN(c.prompts, dataset_prompts(w, *make_byte_tokenizer(), resolved->prompts));
  IB_TRY(check_prompts_fit(c.prompts, model.max_position_embeddings, model.name, f.dataset_path));
  return std::optional<EvalCalibration>{std::move(c)};
}

nlohmann::json calibration_json(const std::optional<EvalCalibration>& c, const EvalFlags& f) {
  if (!c) return nullptr;
  const bool percentile = c->options.method == CalibrationMethod::kPercentile;
  return {
      {"method", calibration_method_name(c->options.method)},
      {"scheme", activation_scheme_name(c->options.scheme)},
      {"percentile", percentile ? nlohmann::json(c->options.percentile) : nlohmann::json(nullptr)},
      {"prompts", c->prompts.size()},
      {"dataset_path", f.dataset_path}};
}

}  // namespace ib::detail
