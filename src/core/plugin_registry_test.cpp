#include "core/plugin_registry.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace ib {
namespace {

PluginInfo info(std::string name, std::vector<std::string> deps) {
  return PluginInfo{std::move(name), "1.0", PluginKind::kCollector, std::move(deps), ""};
}

size_t pos(const std::vector<std::string>& v, const std::string& s) {
  return static_cast<size_t>(std::find(v.begin(), v.end(), s) - v.begin());
}

TEST(PluginRegistry, OrdersDependenciesFirst) {
  PluginRegistry r;
  ASSERT_TRUE(r.add(info("energy", {"nvml", "clock"}), 0).ok());
  ASSERT_TRUE(r.add(info("nvml", {"clock"}), 0).ok());
  ASSERT_TRUE(r.add(info("clock", {}), 0).ok());
  auto order = r.load_order();
  ASSERT_TRUE(order.ok()) << order.error().message;
  EXPECT_EQ(order->size(), 3u);
  EXPECT_LT(pos(*order, "clock"), pos(*order, "nvml"));
  EXPECT_LT(pos(*order, "nvml"), pos(*order, "energy"));
}

TEST(PluginRegistry, RejectsCycleAndNamesIt) {
  PluginRegistry r;
  ASSERT_TRUE(r.add(info("a", {"b"}), 0).ok());
  ASSERT_TRUE(r.add(info("b", {"c"}), 0).ok());
  ASSERT_TRUE(r.add(info("c", {"a"}), 0).ok());
  auto order = r.load_order();
  ASSERT_FALSE(order.ok());
  EXPECT_NE(order.error().message.find("cycle"), std::string::npos);
  EXPECT_NE(order.error().message.find("a -> b -> c -> a"), std::string::npos)
      << order.error().message;
}

TEST(PluginRegistry, RejectsMissingDependency) {
  PluginRegistry r;
  ASSERT_TRUE(r.add(info("json", {"results"}), 0).ok());
  auto order = r.load_order();
  ASSERT_FALSE(order.ok());
  EXPECT_NE(order.error().message.find("'results'"), std::string::npos);
}

TEST(PluginRegistry, RejectsDuplicateAndTypedFactory) {
  PluginRegistry r;
  ASSERT_TRUE(r.add(info("x", {}), std::any(42)).ok());
  EXPECT_FALSE(r.add(info("x", {}), std::any(1)).ok());
  auto f = r.factory<int>("x");
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(*f, 42);
  EXPECT_FALSE(r.factory<double>("x").ok());
  EXPECT_FALSE(r.factory<int>("nope").ok());
}

}  // namespace
}  // namespace ib
