// `inferbench sweep --find-oom`: the OOM search on the first cell's engine settings, every
// finished probe kept on disk as it completes.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "backend/backend_factory.h"
#include "core/fs.h"
#include "orchestrate/detail/sweep_grid.h"
#include "orchestrate/detail/sweep_probe.h"
#include "orchestrate/orchestrate.h"
#include "telemetry/env.h"

namespace ib {

using nlohmann::json;
namespace fs = std::filesystem;

Result<Outcome> execute_find_oom(const SweepConfig& s, const SweepCell& first,
                                 const OomSearchConfig& search, const std::atomic<bool>& stop) {
  const fs::path& dir = s.dir;
  IB_TRY(detail::create_sweep_dir(dir));
  const NativeTargetOptions& n = first.plan.target.native;
  if (first.plan.device == "cpu" && !n.backend.memory_limit_bytes) {
    return user_error(
        "--find-oom on the CPU needs --memory-limit (e.g. 512MiB): host memory "
        "would otherwise be the limit");
  }
  IB_ASSIGN_OR_RETURN(auto backend, create_backend(n.backend));
  detail::OomSearchOptions o;
  o.base.model = n.model;
  o.base.weights = n.weights;
  o.base.engine = n.engine;
  o.base.engine.use_graphs = false;  // each probe rebuilds the engine; graphs would dominate
  o.base.engine.max_num_seqs = search.max_batch;
  o.base.engine.cpu_kv_cache_bytes = n.backend.memory_limit_bytes.value_or(int64_t{1} << 40);
  o.base.steps = search.steps;
  o.base.seed = first.plan.workload.seed;
  o.input_lens = s.input_lens;
  o.max_batch = search.max_batch;
  o.context_batch = search.context_batch;
  // Every finished probe goes to oom_probes.jsonl at once (flushed), so an interrupted or failed
  // search keeps what it measured; oom.json/.md/.svg follow when the search is complete.
  const fs::path probes_path = dir / "oom_probes.jsonl";
  std::ofstream probes_file(probes_path, std::ios::trunc);
  if (!probes_file) {
    return runtime_error("cannot write " + probes_path.string() + "; check the --result-dir");
  }
  int64_t probes_done = 0;
  o.on_probe = [&](const json& line) -> Status {
    probes_file << line.dump() << "\n";
    probes_file.flush();
    if (!probes_file) return runtime_error("cannot write " + probes_path.string());
    ++probes_done;
    return Ok{};
  };
  auto searched = detail::find_oom(*backend, o, stop);
  if (!searched.ok() && stop.load()) {
    std::fprintf(stderr,
                 "inferbench: find-oom interrupted; the %lld finished probe(s) are in %s (no "
                 "thresholds: the search did not finish)\n",
                 static_cast<long long>(probes_done), probes_path.string().c_str());
    return Outcome::kInterrupted;
  }
  IB_ASSIGN_OR_RETURN(json oom, std::move(searched));
  oom["env"] = environment_fingerprint();
  IB_TRY(write_file_atomic(dir / "oom.json", oom.dump(2) + "\n"));
  const std::string md = detail::oom_markdown(oom);
  IB_TRY(write_file_atomic(dir / "oom.md", md));
  IB_TRY(write_file_atomic(dir / "oom_headroom.svg", detail::oom_headroom_svg(oom)));
  std::cout << md;
  std::fprintf(stderr, "inferbench: oom.json, oom.md, oom_headroom.svg in %s\n",
               dir.string().c_str());
  return Outcome::kOk;
}

}  // namespace ib
