// Test support for the end-to-end tests: runs the real inferbench binary (INFERBENCH_BINARY,
// set by ib_test) with stdout and stderr captured in files of a per-test temporary directory.
#pragma once

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/assert.h"
#include "core/fs.h"

namespace ib::testing {

namespace fs = std::filesystem;

inline std::string binary() {
  const char* b = std::getenv("INFERBENCH_BINARY");
  return b ? b : "inferbench";
}

// Any program (args[0], searched on PATH), stdout and stderr into files; returns the pid.
inline pid_t spawn_program(const std::vector<std::string>& args, const fs::path& out,
                           const fs::path& err) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int o = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int e = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(o, STDOUT_FILENO);
    ::dup2(e, STDERR_FILENO);
    std::vector<std::string> copy = args;
    std::vector<char*> argv;
    for (auto& a : copy) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execvp(argv[0], argv.data());
    std::_Exit(127);
  }
  return pid;
}

// Starts the binary with args, stdout and stderr into files; returns the pid.
inline pid_t spawn(const std::vector<std::string>& args, const fs::path& out, const fs::path& err) {
  std::vector<std::string> all{binary()};
  all.insert(all.end(), args.begin(), args.end());
  return spawn_program(all, out, err);
}

inline int wait_exit(pid_t pid) {
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

inline std::vector<std::string> lines_of(const fs::path& p) {
  std::ifstream in(p);
  std::vector<std::string> out;
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

class E2e : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ =
        fs::temp_directory_path() /
        ("ib_e2e_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) +
         "_" + std::to_string(::getpid()));  // two checkouts' tests may run at once
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }

  int run(std::vector<std::string> args) {
    return wait_exit(spawn(args, root_ / "stdout.txt", root_ / "stderr.txt"));
  }
  std::string out() const { return read_file(root_ / "stdout.txt").value(); }
  std::string err() const { return read_file(root_ / "stderr.txt").value(); }
  // A bad input: exit 2, one stderr line "inferbench: error: ..." holding `expect`, nothing on
  // stdout, and `never` (the result the command was given) not created.
  void expect_refused(const std::vector<std::string>& args, const std::string& expect,
                      const fs::path& never) {
    const int code = run(args);
    const std::string e = err();
    const std::string what = args.size() > 2 ? args[1] + " " + args[2] : "";
    EXPECT_EQ(code, 2) << what << ": " << e;
    EXPECT_EQ(e.rfind("inferbench: error: ", 0), 0u) << e;
    EXPECT_NE(e.find(expect), std::string::npos) << e;
    EXPECT_EQ(std::count(e.begin(), e.end(), '\n'), 1) << e;
    EXPECT_FALSE(fs::exists(never)) << e;
    EXPECT_TRUE(out().empty());
  }

  fs::path root_;
};

// A checkpoint directory with its own tokenizer, for `eval --text`: the golden tiny Llama-3
// (vocab 320, BOS 0) with src/cli/testdata/byte-tokenizer.json, a byte-level BPE without merges
// whose ids are the bytes themselves (so a test knows every token of a text). Needs
// INFERBENCH_SOURCE_DIR (ctest sets it).
inline fs::path tiny_checkpoint_with_tokenizer(const fs::path& dir) {
  const char* src = std::getenv("INFERBENCH_SOURCE_DIR");
  IB_ASSERT(src != nullptr, "ctest sets INFERBENCH_SOURCE_DIR");
  const fs::path source(src);
  const fs::path golden = source / "src/engine/testdata/golden/llama3-tied";
  fs::create_directories(dir);
  for (const char* f : {"config.json", "model.safetensors"}) fs::copy_file(golden / f, dir / f);
  fs::copy_file(source / "src/cli/testdata/byte-tokenizer.json", dir / "tokenizer.json");
  return dir;
}

// A two-merge SentencePiece-style tokenizer.json at path: ▁ prepended, spaces as ▁, BOS (id 0)
// from the template; "ab ab" encodes to 0 5 5.
inline void write_two_merge_tokenizer(const fs::path& path) {
  std::ofstream(path) << R"({
    "added_tokens": [{"id": 0, "content": "<s>", "special": true}],
    "normalizer": {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "▁"},
        {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]},
    "post_processor": {"type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": "<s>"}}, {"Sequence": {"id": "A"}}],
        "special_tokens": {"<s>": {"id": "<s>", "ids": [0], "tokens": ["<s>"]}}},
    "decoder": {"type": "Metaspace", "replacement": "▁"},
    "model": {"type": "BPE", "vocab": {"<s>": 0, "▁": 1, "a": 2, "b": 3, "▁a": 4, "▁ab": 5},
              "merges": ["▁ a", "▁a b"]}})";
}

// A model directory holding only config.json: DeepSeek-V2's structure (multi-head latent
// attention, YaRN rope, dense first layer, 8 routed experts top-3 and 2 shared) at toy sizes,
// with the router's scoring_func (the engine runs "softmax": another is refused before loading).
// Run with --load-format dummy.
inline fs::path tiny_deepseek_v2_dir(const fs::path& dir, const std::string& scoring_func) {
  fs::create_directories(dir);
  std::ofstream(dir / "config.json") << R"({"architectures": ["DeepseekV2ForCausalLM"],
  "model_type": "deepseek_v2", "vocab_size": 32000, "hidden_size": 64, "intermediate_size": 96,
  "moe_intermediate_size": 16, "num_hidden_layers": 2, "num_attention_heads": 4,
  "num_key_value_heads": 4, "n_routed_experts": 8, "n_shared_experts": 2,
  "num_experts_per_tok": 3, "first_k_dense_replace": 1, "kv_lora_rank": 32, "q_lora_rank": null,
  "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 12,
  "max_position_embeddings": 1024, "rope_theta": 10000.0,
  "rope_scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 256,
                   "mscale": 0.707, "mscale_all_dim": 0.707},
  "routed_scaling_factor": 1.0, "topk_method": "greedy", "n_group": 1, "topk_group": 1,
  "scoring_func": ")" << scoring_func << R"(", "norm_topk_prob": false, "rms_norm_eps": 1e-6,
  "tie_word_embeddings": false, "hidden_act": "silu", "torch_dtype": "bfloat16",
  "bos_token_id": 1, "eos_token_id": 2})";
  return dir;
}

}  // namespace ib::testing
