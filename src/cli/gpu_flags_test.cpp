// The CUDA flags of `inferbench run`: graphs on by default, --no-cuda-graphs and vLLM's
// --enforce-eager turn them off, the graph limits reach the engine and result.json's config,
// and non-positive limits are user errors.
#include <gtest/gtest.h>

#include "cli/plugins.h"
#include "cli/run_options.h"

namespace ib {
namespace {

RunFlags parse(std::vector<std::string> args) {
  CLI::App app;
  RunFlags f;
  add_run_flags(app, f);
  std::reverse(args.begin(), args.end());
  app.parse(args);
  f.result_dir = (std::filesystem::temp_directory_path() / "ib_gpu_flags_test").string();
  f.overwrite = true;
  f.num_prompts = 2;
  return f;
}

TEST(GpuFlags, GraphsAreOnByDefaultAndBothSpellingsTurnThemOff) {
  PluginRegistry registry;
  ASSERT_TRUE(register_builtin_plugins(registry).ok());
  auto plan = resolve_run(parse({}), registry);
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  EXPECT_TRUE(plan->target.native.engine.use_graphs);
  EXPECT_EQ(plan->config.at("cuda_graphs"), true);
  for (const char* flag : {"--no-cuda-graphs", "--enforce-eager"}) {
    auto off = resolve_run(parse({flag}), registry);
    ASSERT_TRUE(off.ok());
    EXPECT_FALSE(off->target.native.engine.use_graphs) << flag;
    EXPECT_EQ(off->config.at("cuda_graphs"), false) << flag;
  }
  auto limits =
      resolve_run(parse({"--max-graph-batch", "64", "--max-graph-context", "2048"}), registry);
  ASSERT_TRUE(limits.ok());
  EXPECT_EQ(limits->target.native.engine.max_graph_batch, 64);
  EXPECT_EQ(limits->target.native.engine.max_graph_context, 2048);
  auto bad = resolve_run(parse({"--max-graph-batch", "0"}), registry);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().kind, ErrorKind::kUser);
  EXPECT_NE(bad.error().message.find("--max-graph-batch"), std::string::npos);
}

}  // namespace
}  // namespace ib
