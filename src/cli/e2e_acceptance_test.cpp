// The done-criterion of issue 2, run for real: the 1.24B-parameter Llama-3.2-1B preset with dummy
// weights on the CPU (about 5 GiB of fp32 weights; tens of seconds on 2 cores).
#include <nlohmann/json.hpp>

#include "cli/detail/e2e_support.h"

namespace ib {
namespace {

using nlohmann::json;
using testing::E2e;
using testing::lines_of;

TEST_F(E2e, AcceptanceCommandRunsEndToEnd) {
  const auto dir = root_ / "result";
  ASSERT_EQ(run({"run", "--model", "llama-3.2-1b", "--load-format", "dummy", "--device", "cpu",
                 "--num-prompts", "4", "--input-len", "16", "--output-len", "8", "--result-dir",
                 dir.string()}),
            0)
      << err();
  const json r = json::parse(read_file(dir / "result.json").value());
  EXPECT_EQ(r["model_id"], "llama-3.2-1b");
  EXPECT_EQ(r["completed"], 4);
  EXPECT_EQ(r["total_output_tokens"], 32);
  EXPECT_EQ(r["num_runs"], 3);
  EXPECT_EQ(r["engine"]["model"]["parameters"].get<int64_t>() / 10'000'000, 123);  // 1.236 B
  EXPECT_EQ(lines_of(dir / "requests.jsonl").size(), 4u + 3 * 4);
  EXPECT_NE(out().find("| Output token throughput |"), std::string::npos);
}

}  // namespace
}  // namespace ib
