// Front door of suite/: `inferbench suite FILE.yaml` without the running. A suite file is a
// declarative list of benchmarks (defaults + entries: models x dtypes x workloads), each entry
// expanding to the flags of one `inferbench run`; the suite state file records which entries
// finished so an interrupted suite resumes; the leaderboard ranks the finished entries.
//
// Suite file:
//   name: seed-table                 # optional
//   defaults: {device: cuda, dtype: bf16, batch_size: 8, runs: 3}   # any `run` flag
//   entries:
//     - model: llama-3.1-8b          # one entry
//     - models: [tiny-15m, tiny-60m] # several
//       dtypes: [fp32]               # optional, x models
//       workloads:                   # optional, x models x dtypes; each a map of run flags
//         - {name: short, input_len: 16, output_len: 8}
//       name: tiny                   # optional prefix of the expanded names
//       batch_size: 4                # flags of this entry (override defaults)
//       allow_failure: true          # optional (also in defaults): record, do not refuse
//       eval: true                   # optional (also in defaults): after the run, `inferbench
//                                    # eval` on the entry's model, dtype and quantization; or a
//                                    # map of eval flags: {text: FILE, reference_dtype: bf16}
// Flag keys are `run` flag names with '_' or '-'; true adds a bare flag, false omits it. A
// relative dataset_path (or eval text) is relative to the suite file's directory.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/result.h"

namespace ib {

// One expanded benchmark.
struct SuiteEntry {
  std::string name;               // unique, a directory name: [A-Za-z0-9._-]
  std::string model;              // the --model value
  std::string dtype;              // the --dtype value ("" when not given: the run's auto)
  std::string workload;           // the workload's name ("" when the entry has none)
  std::vector<std::string> args;  // `inferbench run` arguments, e.g. {"--model", "tiny-15m", ...}
  // allow_failure: true: an entry that cannot run here (unsupported model, dtype, context) is
  // recorded in the leaderboard as not run instead of refusing the suite; its failures do not
  // make the suite's exit code 1.
  bool allow_failure = false;
  // eval: the `inferbench eval` flags beyond those the run gives it (--model, --device, --dtype,
  // --load-format, --seed, --quantization); the suite writes its JSON to DIR/<entry>/eval.json
  // and the leaderboard shows KL, top-1 and perplexity from it. nullopt: no eval.
  std::optional<std::vector<std::string>> eval_args = std::nullopt;
};

struct SuiteSpec {
  std::string name;
  std::vector<SuiteEntry> entries;  // in file order
};

// Parses and expands a suite file's text. User errors name the entry and the key.
Result<SuiteSpec> parse_suite_yaml(const std::string& text, const std::string& source_name);
// A file's relative dataset_path and eval text are relative to the file's directory, so that a
// suite runs from any working directory.
Result<SuiteSpec> load_suite_file(const std::filesystem::path& path);

// --model-list a,b: keeps the entries whose model is listed (order of the file). A listed model
// no entry uses is a user error naming the models the suite has.
Result<std::vector<SuiteEntry>> select_models(const std::vector<SuiteEntry>& entries,
                                              const std::string& model_list);

// --override KEY=VALUE (KEY= for a bare flag): sets a run flag in every entry, replacing the
// value the file gave it, so that each entry's arguments stay free of duplicates.
Status apply_override(std::vector<SuiteEntry>& entries, const std::string& key_value);

// The suite state file in the suite's result directory: one record per entry that finished
// (ok or failed), with the arguments it ran with.
inline constexpr const char* kSuiteStateJson = "suite-state.json";
// An entry's `inferbench eval` numbers (SuiteEntry::eval_args), beside its result.json.
inline constexpr const char* kEvalJson = "eval.json";
// The state of one entry run on its own (a Slurm array task), beside its result.json, so that
// tasks running at once never write one shared file; `suite --collect` merges them.
inline constexpr const char* kEntryStateJson = "entry-state.json";

struct EntryState {
  std::string status;  // "ok", "failed", "interrupted"
  std::string error;   // one line, for failed entries
  std::vector<std::string> args;
  double wall_s = 0;
  std::optional<std::vector<std::string>> eval_args = std::nullopt;
};
// The state was recorded with the entry's flags (run and eval).
bool same_flags(const EntryState& state, const SuiteEntry& entry);

class SuiteState {
 public:
  explicit SuiteState(std::string suite_name = "") : suite_name_(std::move(suite_name)) {}
  static Result<SuiteState> load(const std::filesystem::path& dir);
  Status save(const std::filesystem::path& dir) const;

  // Finished with the same arguments (ok, or failed unless retry_failed): a resumed suite skips
  // it.
  bool done(const SuiteEntry& entry, bool retry_failed = false) const;
  const EntryState* find(const std::string& name) const;
  void record(const std::string& name, EntryState state);
  const std::string& suite_name() const { return suite_name_; }

 private:
  std::string suite_name_;
  std::vector<std::pair<std::string, EntryState>> entries_;  // in completion order
};

// DIR/<name>/entry-state.json: written atomically; nullopt when there is none, a user error when
// it is not an entry state of that name.
Status save_entry_state(const std::filesystem::path& dir, const std::string& name,
                        const EntryState& state);
Result<std::optional<EntryState>> load_entry_state(const std::filesystem::path& dir,
                                                   const std::string& name);

// One leaderboard row, from an entry's state and its result.json (null when it has none).
struct LeaderboardRow {
  std::string entry;
  std::string model;
  int64_t parameters = 0;  // 0: unknown
  std::string precision;
  std::optional<double> output_tok_s;
  std::optional<double> ttft_median_ms;
  std::optional<double> ttft_p99_ms;
  // What the engine needed at its peak: weights + KV blocks in use + activations + graphs
  // (memory.peaks.engine_demand_bytes; under tensor parallelism the largest rank's,
  // rank<r>_demand_bytes: what one GPU must hold). A preallocated KV pool makes the device's own
  // number (below) nearly the same for every model, so this is the column that compares models.
  std::optional<double> engine_peak_gib;
  // The KV cache's bytes per token over all layers (engine.engine.kv_bytes_per_token), and what
  // ordinary attention's K and V of every KV head would take (..._gqa): they differ for
  // multi-head latent attention (kv_layout "mla-latent", DeepSeek-V2).
  std::optional<double> kv_bytes_per_token;
  std::optional<double> kv_bytes_per_token_gqa;
  std::optional<double> peak_gib;
  std::string peak_source;  // "gpu" (NVML used), "rss" (process), ""
  std::optional<double> tokens_per_joule;
  std::optional<double> bandwidth_share;  // decode bytes / s over the measured copy ceiling
  // From eval.json (entries with eval): against the eval's reference (the unquantized model).
  std::optional<double> kl_mean;
  std::optional<double> kl_p99;
  std::optional<double> top1_agreement;
  std::optional<double> perplexity;            // --text: the entry's
  std::optional<double> reference_perplexity;  // --text: the reference's
  std::string status;  // "ok", "ok, unstable: ...", "failed: ...", "pending"
};
// eval: the entry's eval.json (null when it has none).
LeaderboardRow leaderboard_row(const SuiteEntry& entry, const EntryState* state,
                               const nlohmann::json& result, const nlohmann::json& eval,
                               int64_t parameters);
// Ranked: finished entries by output tok/s (highest first), then failed and pending ones.
void rank_rows(std::vector<LeaderboardRow>& rows);

std::string leaderboard_markdown(const std::vector<LeaderboardRow>& rows, const std::string& title);
std::string leaderboard_csv(const std::vector<LeaderboardRow>& rows);
// Self-contained HTML: the table, then heatmap_svg inline (may be empty).
std::string leaderboard_html(const std::vector<LeaderboardRow>& rows, const std::string& title,
                             const std::string& heatmap_svg);

}  // namespace ib
