// --lora-assignment: the parser's refusals and the shares each kind gives.
#include "workload/lora_assignment.h"

#include <gtest/gtest.h>

#include <map>

namespace ib {
namespace {

TEST(LoraAssignment, Parses) {
  EXPECT_EQ(parse_lora_assignment("random")->kind, LoraAssignment::Kind::kRandom);
  EXPECT_EQ(parse_lora_assignment("round-robin")->kind, LoraAssignment::Kind::kRoundRobin);
  EXPECT_DOUBLE_EQ(parse_lora_assignment("zipf:1.5")->zipf_s, 1.5);
  for (const char* bad : {"zipf", "zipf:", "zipf:0", "zipf:-1", "zipf:x", "uniform"}) {
    auto a = parse_lora_assignment(bad);
    ASSERT_FALSE(a.ok()) << bad;
    EXPECT_NE(a.error().message.find("--lora-assignment"), std::string::npos);
  }
}

std::map<std::string, int> counts(const std::vector<std::string>& v) {
  std::map<std::string, int> m;
  for (const auto& s : v) ++m[s];
  return m;
}

TEST(LoraAssignment, SharesAndDeterminism) {
  const std::vector<std::string> names = {"a", "b", "c", "d"};
  const auto rr = assign_lora_adapters(8, names, *parse_lora_assignment("round-robin"), 0);
  EXPECT_EQ(rr, (std::vector<std::string>{"a", "b", "c", "d", "a", "b", "c", "d"}));
  const auto random = assign_lora_adapters(4000, names, *parse_lora_assignment("random"), 7);
  EXPECT_EQ(random, assign_lora_adapters(4000, names, *parse_lora_assignment("random"), 7));
  for (const auto& [name, n] : counts(random)) EXPECT_NEAR(n, 1000, 120) << name;
  // zipf:1 over 4: shares 1, 1/2, 1/3, 1/4 of 25/12 = 0.48, 0.24, 0.16, 0.12.
  const auto zipf = counts(assign_lora_adapters(4000, names, *parse_lora_assignment("zipf:1"), 3));
  EXPECT_NEAR(zipf.at("a"), 1920, 150);
  EXPECT_NEAR(zipf.at("d"), 480, 100);
  EXPECT_GT(zipf.at("b"), zipf.at("c"));
}

}  // namespace
}  // namespace ib
