// Every flag an error message of the lower layers tells a user to change exists: the `--name`s
// quoted in the sources of engine/, model/, backend/, targets/ and orchestrate/ (tests and test
// fixture programs excluded) are each a flag of some `inferbench` subcommand, read from the
// binary's --help.
#include <gtest/gtest.h>

#include <filesystem>
#include <regex>
#include <set>

#include "cli/detail/e2e_support.h"

namespace ib {
namespace {

namespace fs = std::filesystem;

class FlagNames : public testing::E2e {};

std::set<std::string> flags_in(const std::string& text) {
  static const std::regex flag(R"(--[a-z][a-z0-9-]+)");
  std::set<std::string> out;
  for (std::sregex_iterator it(text.begin(), text.end(), flag), end; it != end; ++it)
    out.insert(it->str());
  return out;
}

// The flags quoted in string literals of one source file.
std::set<std::string> quoted_flags(const std::string& source) {
  static const std::regex literal(R"xx("(?:[^"\\\n]|\\.)*")xx");
  std::set<std::string> out;
  for (std::sregex_iterator it(source.begin(), source.end(), literal), end; it != end; ++it) {
    for (const std::string& f : flags_in(it->str())) out.insert(f);
  }
  return out;
}

TEST_F(FlagNames, EveryFlagAnErrorNamesExists) {
  std::set<std::string> known;
  for (const char* sub : {"run", "serve", "sweep", "generate", "models", "env", "plugins", "plot",
                          "suite", "compare"}) {
    ASSERT_EQ(run({sub, "--help"}), 0) << sub << ": " << err();
    for (const std::string& f : flags_in(out())) known.insert(f);
  }
  ASSERT_GT(known.size(), 40u);
  const char* src = std::getenv("INFERBENCH_SOURCE_DIR");
  ASSERT_NE(src, nullptr);
  std::vector<std::string> unknown;
  for (const char* dir : {"engine", "model", "backend", "targets", "orchestrate"}) {
    for (const auto& entry : fs::recursive_directory_iterator(fs::path(src) / "src" / dir)) {
      const std::string name = entry.path().filename().string();
      const std::string ext = entry.path().extension().string();
      // Tests, and the programs that write their fixtures (gguf_fixture: its own flags), are not
      // inferbench's.
      const bool test_code =
          name.find("_test") != std::string::npos || name.find("_fixture") != std::string::npos;
      if (test_code || (ext != ".cpp" && ext != ".h")) continue;
      for (const std::string& f : quoted_flags(read_file(entry.path()).value())) {
        if (!known.contains(f)) unknown.push_back(entry.path().string() + ": " + f);
      }
    }
  }
  EXPECT_TRUE(unknown.empty()) << [&] {
    std::string s;
    for (const auto& u : unknown) s += u + "\n";
    return s;
  }();
}

}  // namespace
}  // namespace ib
