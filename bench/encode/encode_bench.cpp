// Tokenizer encode speed on one core: a mixed text of about 1 MiB, built deterministically from
// the tokenizer test corpus (lines in a seeded shuffled order until the size is reached), encoded
// as one text and as its separate lines (the way a many-stream client encodes prompts). One
// warm-up, then --runs timed repetitions; the median and the spread are reported with every raw
// sample, the build provenance and the exact input.
// Usage: ib_encode_bench MODEL_DIR CORPUS [--bytes N] [--runs N] [--seed N] [--json FILE]
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/build_info.h"
#include "model/tokenizer.h"

namespace {

using Clock = std::chrono::steady_clock;

// The bench text: corpus lines drawn in an order fixed by seed (an LCG, so that it is the same
// on every platform), joined by '\n', until at least bytes.
std::vector<std::string> build_lines(const std::string& corpus, size_t bytes, uint64_t seed) {
  std::vector<std::string> lines;
  std::istringstream in(corpus);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) lines.push_back(line);
  }
  std::vector<std::string> out;
  size_t total = 0;
  uint64_t state = seed * 6364136223846793005ull + 1442695040888963407ull;
  while (total < bytes && !lines.empty()) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    const std::string& line = lines[(state >> 33) % lines.size()];
    out.push_back(line);
    total += line.size() + 1;
  }
  return out;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  }
  return "unknown";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr,
                 "usage: ib_encode_bench MODEL_DIR CORPUS [--bytes N] [--runs N] [--seed N] "
                 "[--json FILE]\n");
    return 2;
  }
  const std::string model = argv[1];
  const std::string corpus_file = argv[2];
  size_t bytes = 1 << 20;
  int runs = 5;
  uint64_t seed = 0;
  std::string json_file;
  for (int i = 3; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--bytes")
      bytes = std::strtoull(argv[i + 1], nullptr, 10);
    else if (flag == "--runs")
      runs = std::atoi(argv[i + 1]);
    else if (flag == "--seed")
      seed = std::strtoull(argv[i + 1], nullptr, 10);
    else if (flag == "--json")
      json_file = argv[i + 1];
    else {
      std::fprintf(stderr, "unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  if (runs < 1) runs = 1;
  // One core: the process is pinned to the first CPU it may run on.
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  int pinned_cpu = -1;
  if (sched_getaffinity(0, sizeof(allowed), &allowed) == 0) {
    for (int c = 0; c < CPU_SETSIZE; ++c) {
      if (CPU_ISSET(c, &allowed)) {
        pinned_cpu = c;
        break;
      }
    }
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(pinned_cpu, &one);
    if (sched_setaffinity(0, sizeof(one), &one) != 0) pinned_cpu = -1;
  }

  auto tokenizer = ib::load_tokenizer(model);
  if (!tokenizer.ok()) {
    std::fprintf(stderr, "%s\n", tokenizer.error().message.c_str());
    return 1;
  }
  std::ifstream in(corpus_file, std::ios::binary);
  std::stringstream corpus;
  corpus << in.rdbuf();
  const std::vector<std::string> lines = build_lines(corpus.str(), bytes, seed);
  std::string text;
  for (const std::string& l : lines) text += l + "\n";

  // Each sample: seconds to encode the whole text at once, and line by line.
  std::vector<double> whole_s, lines_s;
  size_t whole_tokens = 0, line_tokens = 0;
  for (int r = 0; r <= runs; ++r) {  // r == 0: warm-up
    auto t0 = Clock::now();
    whole_tokens = (*tokenizer)->encode(text).size();
    auto t1 = Clock::now();
    line_tokens = 0;
    for (const std::string& l : lines) line_tokens += (*tokenizer)->encode(l).size();
    auto t2 = Clock::now();
    if (r == 0) continue;
    whole_s.push_back(std::chrono::duration<double>(t1 - t0).count());
    lines_s.push_back(std::chrono::duration<double>(t2 - t1).count());
  }
  const auto rate = [](size_t n, const std::vector<double>& s) {
    std::vector<double> r;
    for (double x : s) r.push_back(static_cast<double>(n) / x);
    return r;
  };
  const std::vector<double> whole_rate = rate(whole_tokens, whole_s);
  const std::vector<double> lines_rate = rate(line_tokens, lines_s);
  const ib::BuildInfo b = ib::build_info();
  nlohmann::ordered_json out = {
      {"bench", "tokenizer encode, one core"},
      {"model", model},
      {"tokenizer", (*tokenizer)->name()},
      {"corpus", corpus_file},
      {"seed", seed},
      {"text_bytes", text.size()},
      {"lines", lines.size()},
      {"runs", runs},
      {"warmup_runs", 1},
      {"pinned_cpu", pinned_cpu},
      {"cpu", cpu_model()},
      {"git_sha", b.git_sha},
      {"git_dirty", b.git_dirty},
      {"compiler", b.compiler},
      {"build_type", b.build_type},
      {"whole_text",
       {{"tokens", whole_tokens},
        {"tokens_per_s_median", median(whole_rate)},
        {"tokens_per_s_min", *std::min_element(whole_rate.begin(), whole_rate.end())},
        {"tokens_per_s_max", *std::max_element(whole_rate.begin(), whole_rate.end())},
        {"mib_per_s_median", static_cast<double>(text.size()) / median(whole_s) / (1 << 20)},
        {"seconds", whole_s}}},
      {"per_line",
       {{"tokens", line_tokens},
        {"tokens_per_s_median", median(lines_rate)},
        {"tokens_per_s_min", *std::min_element(lines_rate.begin(), lines_rate.end())},
        {"tokens_per_s_max", *std::max_element(lines_rate.begin(), lines_rate.end())},
        {"seconds", lines_s}}},
  };
  std::printf(
      "%s: %zu bytes, %zu tokens whole: %.0f tokens/s median (%.0f..%.0f, %.2f MiB/s); "
      "per line: %.0f tokens/s median (%.0f..%.0f)\n",
      model.c_str(), text.size(), whole_tokens, median(whole_rate),
      *std::min_element(whole_rate.begin(), whole_rate.end()),
      *std::max_element(whole_rate.begin(), whole_rate.end()),
      static_cast<double>(text.size()) / median(whole_s) / (1 << 20), median(lines_rate),
      *std::min_element(lines_rate.begin(), lines_rate.end()),
      *std::max_element(lines_rate.begin(), lines_rate.end()));
  if (!json_file.empty()) {
    std::ofstream f(json_file);
    f << out.dump(2) << "\n";
  }
  return 0;
}
