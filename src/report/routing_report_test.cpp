// expert_load.svg: one cell per layer x expert, coloured by load / mean, with its count.
#include "report/routing_report.h"

#include <gtest/gtest.h>

namespace ib {
namespace {

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

TEST(ExpertLoadSvg, OneCellPerLayerAndExpert) {
  const nlohmann::json routing{{"experts_per_token", 2},
                               {"tokens_per_layer_expert", {{2, 2, 2, 2}, {8, 0, 0, 0}}}};
  const std::string svg = expert_load_svg(routing, "Expert load: tiny <moe>");
  EXPECT_EQ(count(svg, "<rect x="), 8u + 1u) << svg;  // the cells and the colour bar
  EXPECT_NE(svg.find("layer 1 expert 0: 8 tokens, 4.00 x the mean"), std::string::npos);
  EXPECT_NE(svg.find("layer 0 expert 3: 2 tokens, 1.00 x the mean"), std::string::npos);
  // The most loaded cell takes the top of the scale, an idle one the bottom.
  EXPECT_NE(svg.find("fill=\"#fde725\"><title>layer 1 expert 0"), std::string::npos) << svg;
  EXPECT_NE(svg.find("fill=\"#440154\"><title>layer 1 expert 1"), std::string::npos) << svg;
  EXPECT_NE(svg.find("tiny &lt;moe&gt;"), std::string::npos);
  EXPECT_NE(svg.find("top-2 routing"), std::string::npos);
}

TEST(ExpertLoadSvg, NothingWithoutCounts) {
  EXPECT_EQ(expert_load_svg(nullptr, "t"), "");
  EXPECT_EQ(expert_load_svg(nlohmann::json::object(), "t"), "");
}

}  // namespace
}  // namespace ib
