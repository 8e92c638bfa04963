#include "cli/run_options.h"
#include "backend/backend_factory.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "cli/detail/e2e_support.h"
#include "cli/plugins.h"
#include "cli/suite_commands.h"
#include "core/subprocess.h"

namespace ib {
namespace {

namespace fs = std::filesystem;

class RunOptionsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(register_builtin_plugins(registry_).ok());
    root_ =
        fs::temp_directory_path() /
        ("ib_cli_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }

  RunFlags flags() const {
    RunFlags f;
    f.model = "tiny-15m";
    f.num_prompts = 4;
    f.input_len = 16;
    f.output_len = 8;
    f.result_dir = (root_ / "out").string();
    return f;
  }

  // A run split over `clients` processes against an HTTP server.
  RunFlags client_flags(int num_prompts, int max_concurrency, int clients) const {
    RunFlags f = flags();
    f.backend = "openai";
    f.num_prompts = num_prompts;
    f.max_concurrency = max_concurrency;
    f.num_clients = clients;
    return f;
  }

  // The user error resolving `f` gives ("" and a failed expectation when it resolves).
  std::string error_of(const RunFlags& f) const {
    auto r = resolve_run(f, registry_);
    EXPECT_FALSE(r.ok());
    if (r.ok()) return std::string();
    EXPECT_EQ(r.error().kind, ErrorKind::kUser) << r.error().message;
    return r.error().message;
  }

  PluginRegistry registry_;
  fs::path root_;
};

TEST_F(RunOptionsTest, DefaultsFollowTheSeedProtocol) {
  RunFlags f;
  f.result_dir = (root_ / "out").string();
  auto plan = resolve_run(f, registry_);
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  EXPECT_EQ(plan->model.name, "tiny-15m");
  EXPECT_EQ(plan->requests.size(), 200u);
  EXPECT_EQ(plan->requests[0].input_len, 32);
  EXPECT_EQ(plan->requests[0].output_len, 128);
  EXPECT_EQ(plan->runner.mode, LoadMode::kStatic);
  EXPECT_EQ(plan->runner.batch_size, 8);
  EXPECT_EQ(plan->runner.runs, 3);
  EXPECT_EQ(plan->runner.num_warmups, 8);  // one batch
  EXPECT_EQ(plan->load_description, "static batches of 8");
  EXPECT_EQ(plan->target.native.backend.dtype, DType::kF32);
  EXPECT_EQ(plan->metrics.percentiles, std::vector<double>{99});
  EXPECT_EQ(plan->percentile_metrics, (std::vector<std::string>{"ttft", "tpot", "itl"}));
  EXPECT_FALSE(plan->metrics.goodput.has_value());
  EXPECT_TRUE(plan->target.native.ignore_eos);
  // KV pool sized for 8 sequences of 160 tokens (+1 block each), not the 2 GiB default.
  const int64_t per_token = plan->model.kv_bytes_per_token(DType::kF32);
  EXPECT_EQ(plan->target.native.engine.cpu_kv_cache_bytes, 8 * 11 * 16 * per_token);
  EXPECT_TRUE(plan->config["max_model_len"].is_null());  // the engine's choice, in "engine"
  EXPECT_EQ(plan->config["load_mode"], "static");
  EXPECT_FALSE(fs::exists(root_ / "out"));  // nothing is created while resolving
  // The CPU takes vLLM's batch limits for devices other than a large GPU.
  EXPECT_EQ(plan->target.native.engine.max_num_seqs, 256);
  EXPECT_EQ(plan->target.native.engine.max_num_batched_tokens, 8192);
  EXPECT_EQ(plan->config["max_num_batched_tokens"], 8192);
}

// --max-num-seqs / --max-num-batched-tokens: unset, the device's vLLM defaults; given, as given.
TEST_F(RunOptionsTest, BatchLimitsDefaultByDeviceAndFlagsOverrideThem) {
  EngineFlags f;
  const BatchDefaults h200 = vllm_batch_defaults("NVIDIA H200", int64_t{141} << 30, false);
  auto c = engine_config_from(f, h200);
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->max_num_seqs, 1024);
  EXPECT_EQ(c->max_num_batched_tokens, 16384);
  f.max_num_seqs = 64;
  f.max_num_batched_tokens = 2048;
  c = engine_config_from(f, h200);
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->max_num_seqs, 64);
  EXPECT_EQ(c->max_num_batched_tokens, 2048);
  const BatchDefaults cpu = batch_defaults_for("cpu", false);
  EXPECT_EQ(cpu.max_num_seqs, 256);
  EXPECT_EQ(cpu.max_num_batched_tokens, 8192);

  RunFlags r = flags();
  r.max_num_seqs = 7;
  r.max_num_batched_tokens = 300;
  auto plan = resolve_run(r, registry_);
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  EXPECT_EQ(plan->target.native.engine.max_num_seqs, 7);
  EXPECT_EQ(plan->config["max_num_batched_tokens"], 300);
}

TEST_F(RunOptionsTest, LoadModeFollowsRateAndConcurrency) {
  RunFlags f = flags();
  f.request_rate = "2.5";
  auto open = resolve_run(f, registry_);
  ASSERT_TRUE(open.ok()) << open.error().message;
  EXPECT_EQ(open->runner.mode, LoadMode::kOpen);
  EXPECT_DOUBLE_EQ(open->runner.request_rate, 2.5);
  EXPECT_EQ(open->load_description, "open loop at 2.5 req/s, burstiness 1");

  f = flags();
  f.max_concurrency = 3;
  auto closed = resolve_run(f, registry_);
  ASSERT_TRUE(closed.ok()) << closed.error().message;
  EXPECT_EQ(closed->runner.mode, LoadMode::kClosed);
  EXPECT_EQ(closed->runner.num_warmups, 3);

  f.request_rate = "10";
  auto capped = resolve_run(f, registry_);
  ASSERT_TRUE(capped.ok());
  EXPECT_EQ(capped->runner.mode, LoadMode::kOpen);
  EXPECT_EQ(capped->runner.max_concurrency, 3);

  f = flags();
  f.input_len_dist = "uniform:min=4,max=12";
  f.goodput = "ttft:100,tpot:20";
  f.metric_percentiles = "50,90";
  auto dist = resolve_run(f, registry_);
  ASSERT_TRUE(dist.ok()) << dist.error().message;
  for (const auto& r : dist->requests) {
    EXPECT_GE(r.input_len, 4);
    EXPECT_LE(r.input_len, 12);
  }
  ASSERT_TRUE(dist->metrics.goodput.has_value());
  EXPECT_EQ(dist->metrics.goodput->tpot_ms, 20);
  EXPECT_EQ(dist->metrics.percentiles, (std::vector<double>{50, 90}));
}

TEST_F(RunOptionsTest, BadInputIsAOneLineUserErrorNamingTheProblem) {
  const fs::path bad_dataset = root_ / "bad.jsonl";
  std::ofstream(bad_dataset) << "{\"prompt\": \"ok\"}\n{\"prompt\": 5}\n";
  struct Case {
    std::function<void(RunFlags&)> change;
    std::string expect;
  };
  const std::vector<Case> cases = {
      {[](RunFlags& f) { f.model = "llama-9000"; }, "llama-9000"},
      {[&](RunFlags& f) {
         f.model = testing::tiny_deepseek_v2_dir(root_ / "sigmoid", "sigmoid").string();
       },
       "scoring_func 'sigmoid'"},
      {[](RunFlags& f) {
         f.input_len = 1000;
         f.output_len = 100;
       },
       "1100"},
      {[](RunFlags& f) { f.max_model_len = 4096; }, "--max-model-len"},
      {[](RunFlags& f) { f.num_prompts = 0; }, "--num-prompts"},
      {[](RunFlags& f) { f.input_len = 0; }, "--input-len"},
      {[](RunFlags& f) { f.output_len = -3; }, "--output-len"},
      {[](RunFlags& f) { f.runs = 0; }, "--runs"},
      {[](RunFlags& f) { f.batch_size = 0; }, "--batch-size"},
      {[](RunFlags& f) { f.num_warmups = -2; }, "--num-warmups"},
      {[](RunFlags& f) { f.request_rate = "0"; }, "--request-rate"},
      {[](RunFlags& f) { f.request_rate = "fast"; }, "--request-rate"},
      {[](RunFlags& f) {
         f.request_rate = "2";
         f.burstiness = 0;
       },
       "--burstiness"},
      {[](RunFlags& f) { f.max_concurrency = -1; }, "--max-concurrency"},
      {[](RunFlags& f) { f.load_mode = "closed"; }, "--max-concurrency"},
      {[](RunFlags& f) {
         f.load_mode = "static";
         f.request_rate = "3";
       },
       "--load-mode"},
      {[](RunFlags& f) { f.load_mode = "sideways"; }, "--load-mode"},
      {[](RunFlags& f) { f.input_len_dist = "normal:mean=10"; }, "--input-len-dist"},
      {[](RunFlags& f) { f.dataset_name = "jsonl"; }, "--dataset-path"},
      {[](RunFlags& f) { f.dataset_name = "sharegpt"; }, "--dataset-name"},
      {[&](RunFlags& f) {
         f.dataset_name = "jsonl";
         f.dataset_path = bad_dataset.string();
       },
       "bad.jsonl:2"},
      {[](RunFlags& f) {
         f.dataset_name = "jsonl";
         f.dataset_path = "/nonexistent/x.jsonl";
       },
       "/nonexistent/x.jsonl"},
      {[](RunFlags& f) { f.metric_percentiles = "99,200"; }, "--metric-percentiles"},
      {[](RunFlags& f) { f.percentile_metrics = "ttft,speed"; }, "--percentile-metrics"},
      {[](RunFlags& f) { f.goodput = "ttft=5"; }, "--goodput"},
      {[](RunFlags& f) { f.dtype = "int3"; }, "--dtype"},
      {[](RunFlags& f) { f.dtype = "bf16"; }, "fp32"},
      {[](RunFlags& f) { f.device = "tpu"; }, "--device"},
      {[](RunFlags& f) { f.temperature = -1; }, "--temperature"},
      {[](RunFlags& f) { f.top_p = 0; }, "--top-p"},
      {[](RunFlags& f) { f.top_k = -1; }, "--top-k"},
      {[](RunFlags& f) { f.block_size = 0; }, "--block-size"},
      {[](RunFlags& f) { f.gpu_memory_utilization = 1.5; }, "--gpu-memory-utilization"},
      {[](RunFlags& f) { f.kv_cache_memory = "lots"; }, "--kv-cache-memory"},
      {[](RunFlags& f) { f.batching = "dynamic"; }, "--batching"},
      {[](RunFlags& f) { f.load_format = "pickle"; },
       "--load-format pickle: use auto, dummy, safetensors or gguf"},
      {[](RunFlags& f) { f.quantization = "gguf"; }, "give --model FILE.gguf"},
      {[](RunFlags& f) { f.backend = "vllm"; }, "--backend"},
      {[](RunFlags& f) { f.memory_sample_interval_ms = 0; }, "--memory-sample-interval"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    RunFlags f = flags();
    cases[i].change(f);
    auto plan = resolve_run(f, registry_);
    ASSERT_FALSE(plan.ok()) << "case " << i;
    EXPECT_EQ(plan.error().kind, ErrorKind::kUser) << "case " << i;
    EXPECT_NE(plan.error().message.find(cases[i].expect), std::string::npos)
        << "case " << i << ": " << plan.error().message;
    EXPECT_EQ(plan.error().message.find('\n'), std::string::npos) << plan.error().message;
    EXPECT_FALSE(fs::exists(root_ / "out")) << "case " << i;
  }
}

TEST_F(RunOptionsTest, TracingFlagsAreCheckedAndReachTheTarget) {
  RunFlags f = flags();
  f.backend = "openai";
  f.otlp_endpoint = "http://127.0.0.1:4318";
  f.trace_sample_ratio = 0.25;
  f.trace_slow_ms = 500;
  auto plan = resolve_run(f, registry_);
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  EXPECT_EQ(plan->target.openai.trace.endpoint, "http://127.0.0.1:4318");
  EXPECT_EQ(plan->target.openai.trace.sample_ratio, 0.25);
  EXPECT_EQ(plan->target.openai.trace.slow_ms, 500);
  EXPECT_EQ(plan->config["otlp_endpoint"], "http://127.0.0.1:4318");

  // The native backend traces the engine's requests itself; the HTTP client stays off.
  RunFlags native = flags();
  native.otlp_endpoint = "http://127.0.0.1:4318";
  native.trace_slow_ms = 20;
  auto native_plan = resolve_run(native, registry_);
  ASSERT_TRUE(native_plan.ok()) << native_plan.error().message;
  EXPECT_EQ(native_plan->target.native.trace.endpoint, "http://127.0.0.1:4318");
  EXPECT_EQ(native_plan->target.native.trace.slow_ms, 20);
  EXPECT_EQ(native_plan->target.native.trace.service_name, "inferbench run");
  EXPECT_TRUE(native_plan->target.openai.trace.endpoint.empty());
  EXPECT_TRUE(plan->target.native.trace.endpoint.empty());
  RunFlags ratio = f;
  ratio.trace_sample_ratio = 2;
  EXPECT_NE(error_of(ratio).find("--trace-sample-ratio"), std::string::npos);
  RunFlags no_endpoint = flags();
  no_endpoint.backend = "openai";
  no_endpoint.trace_sample_ratio = 0.5;
  EXPECT_NE(error_of(no_endpoint).find("need --otlp-endpoint"), std::string::npos);
}

TEST_F(RunOptionsTest, NumClientsSplitTheWorkloadTheConcurrencyAndTheRate) {
  RunFlags f = client_flags(30, 7, 3);
  auto parent = resolve_run(f, registry_);
  ASSERT_TRUE(parent.ok()) << parent.error().message;
  EXPECT_EQ(parent->num_clients, 3);
  EXPECT_EQ(parent->config["num_clients"], 3);
  ASSERT_GE(parent->client_argv.size(), 2u);
  EXPECT_EQ(parent->client_argv[1], "run");
  // The clients rerun the resolved flags, not the parent's --num-clients.
  const auto& argv = parent->client_argv;
  EXPECT_EQ(std::find(argv.begin(), argv.end(), "--num-clients"), argv.end());
  EXPECT_NE(std::find(argv.begin(), argv.end(), "--max-concurrency"), argv.end());

  int concurrency = 0;
  std::vector<uint64_t> first_tokens;
  for (int i = 0; i < 3; ++i) {
    RunFlags c = f;
    c.num_clients = 1;
    c.client_slice = std::to_string(i) + "/3";
    auto client = resolve_run(c, registry_);
    ASSERT_TRUE(client.ok()) << client.error().message;
    EXPECT_EQ(client->requests.size(), 10u);
    // Client i holds requests i, i + 3, ... of the whole workload.
    EXPECT_EQ(client->requests[1].prompt_tokens,
              parent->requests[static_cast<size_t>(i) + 3].prompt_tokens);
    concurrency += client->runner.max_concurrency;
    EXPECT_NE(client->runner.seed, parent->runner.seed);
  }
  EXPECT_EQ(concurrency, 7);

  RunFlags open = f;
  open.max_concurrency = 0;
  open.request_rate = "12";
  open.num_clients = 1;
  open.client_slice = "1/4";
  auto client = resolve_run(open, registry_);
  ASSERT_TRUE(client.ok()) << client.error().message;
  EXPECT_DOUBLE_EQ(client->runner.request_rate, 3.0);

  RunFlags native = f;
  native.backend = "native";
  EXPECT_NE(error_of(native).find("--backend openai"), std::string::npos);
  RunFlags static_load = f;
  static_load.max_concurrency = 0;
  EXPECT_NE(error_of(static_load).find("--max-concurrency"), std::string::npos);
  RunFlags too_few = f;
  too_few.max_concurrency = 2;
  EXPECT_NE(error_of(too_few).find("at most 2 clients"), std::string::npos);
  RunFlags bad_slice = f;
  bad_slice.num_clients = 1;
  bad_slice.client_slice = "3/3";
  EXPECT_NE(error_of(bad_slice).find("--client-slice"), std::string::npos);
  RunFlags zero = f;
  zero.num_clients = 0;
  EXPECT_NE(error_of(zero).find(">= 1"), std::string::npos);
}

TEST_F(RunOptionsTest, SlurmClientLauncherIsCheckedAndKeptFromTheClients) {
  RunFlags f = client_flags(12, 4, 2);
  f.client_launcher = "slurm";
  f.slurm_partition = "cpu";
  f.slurm_args = {"--nodes=2", "--account=lab"};
  // No srun on PATH: the install hint, before anything is planned.
  const std::string path = std::getenv("PATH") ? std::getenv("PATH") : "";
  ::setenv("PATH", root_.c_str(), 1);
  const std::string no_srun = error_of(f);
  ::setenv("PATH", path.c_str(), 1);
  EXPECT_NE(no_srun.find("srun is not on PATH"), std::string::npos) << no_srun;
  EXPECT_NE(no_srun.find("apt install slurm-client"), std::string::npos) << no_srun;

  RunFlags one = f;
  one.num_clients = 1;
  EXPECT_NE(error_of(one).find("--num-clients N >= 2"), std::string::npos);
  RunFlags bare_arg = f;
  bare_arg.slurm_args = {"nodes=2"};
  EXPECT_NE(error_of(bare_arg).find("--slurm-arg=--nodes=2"), std::string::npos);
  RunFlags no_launcher = f;
  no_launcher.client_launcher = "local";
  EXPECT_NE(error_of(no_launcher).find("--client-launcher slurm"), std::string::npos);

  if (!on_path("srun")) GTEST_SKIP() << "srun is not installed here";
  auto parent = resolve_run(f, registry_);
  ASSERT_TRUE(parent.ok()) << parent.error().message;
  ASSERT_TRUE(parent->slurm_clients.has_value());
  EXPECT_EQ(parent->slurm_clients->partition, "cpu");
  EXPECT_EQ(parent->slurm_clients->extra, (std::vector<std::string>{"--nodes=2", "--account=lab"}));
  EXPECT_EQ(parent->config["client_launcher"], "slurm");
  EXPECT_EQ(parent->config["slurm_arg"].size(), 2u);
  // The clients get the run's flags, not the launcher's (each is one process already).
  for (const char* flag :
       {"--num-clients", "--client-launcher", "--slurm-partition", "--slurm-arg"}) {
    EXPECT_EQ(std::find(parent->client_argv.begin(), parent->client_argv.end(), flag),
              parent->client_argv.end())
        << flag;
  }
  // `run --from` gives the launcher back, one --slurm-arg per option.
  auto args = args_from_config(parent->config);
  ASSERT_TRUE(args.ok()) << args.error().message;
  EXPECT_EQ(std::count(args->begin(), args->end(), "--slurm-arg"), 2);
  // A client on another host takes the parent's origin on the wall clock.
  RunFlags client = f;
  client.num_clients = 1;
  client.client_launcher = "local";
  client.slurm_partition.clear();
  client.slurm_args.clear();
  client.client_slice = "1/2";
  client.clock_origin_unix_ns = 1'700'000'000'000'000'000;
  auto c = resolve_run(client, registry_);
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->clock_origin_unix_ns, 1'700'000'000'000'000'000);
  EXPECT_FALSE(c->clock_origin_ns.has_value());
}

TEST_F(RunOptionsTest, CudaWithoutTheBackendIsAUserError) {
  if (cuda_backend_compiled()) GTEST_SKIP() << "this build has the CUDA backend";
  RunFlags f = flags();
  f.device = "cuda:0";
  auto plan = resolve_run(f, registry_);
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.error().message.find("no CUDA backend"), std::string::npos);
}

TEST_F(RunOptionsTest, ExistingNonEmptyResultDirNeedsOverwrite) {
  RunFlags f = flags();
  fs::create_directories(f.result_dir);
  std::ofstream(fs::path(f.result_dir) / "result.json") << "{}";
  auto refused = resolve_run(f, registry_);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message.find("--overwrite"), std::string::npos);
  f.overwrite = true;
  EXPECT_TRUE(resolve_run(f, registry_).ok());
}

TEST(ParseBytes, UnitsAndErrors) {
  EXPECT_EQ(*parse_bytes("2GiB", "--x"), 2LL << 30);
  EXPECT_EQ(*parse_bytes("512MiB", "--x"), 512LL << 20);
  EXPECT_EQ(*parse_bytes("1.5G", "--x"), 3LL << 29);
  EXPECT_EQ(*parse_bytes("4096", "--x"), 4096);
  for (const char* bad : {"", "-1", "0", "2TB", "GiB", "1e30"}) {
    auto r = parse_bytes(bad, "--x");
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.error().kind, ErrorKind::kUser);
  }
}

}  // namespace
}  // namespace ib
