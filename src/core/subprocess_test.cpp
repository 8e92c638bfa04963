#include "core/subprocess.h"

#include <gtest/gtest.h>

namespace ib {
namespace {

TEST(Subprocess, CollectsOutputAndExitCode) {
  const auto ok = run_command({"sh", "-c", "echo out; echo err >&2; exit 3"});
  ASSERT_TRUE(ok.ok()) << ok.error().message;
  EXPECT_EQ(ok->exit_code, 3);
  EXPECT_NE(ok->output.find("out\n"), std::string::npos);
  EXPECT_NE(ok->output.find("err\n"), std::string::npos);
  const auto killed = run_command({"sh", "-c", "kill -TERM $$"});
  ASSERT_TRUE(killed.ok());
  EXPECT_EQ(killed->exit_code, 128 + 15);
}

TEST(Subprocess, AMissingProgramIsAnErrorNamingIt) {
  const auto missing = run_command({"ib-no-such-program-xyz", "--version"});
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message.find("ib-no-such-program-xyz"), std::string::npos);
  EXPECT_FALSE(on_path("ib-no-such-program-xyz"));
  EXPECT_TRUE(on_path("sh"));
}

}  // namespace
}  // namespace ib
