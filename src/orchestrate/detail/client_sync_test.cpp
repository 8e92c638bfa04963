#include "orchestrate/detail/client_sync.h"

#include <atomic>
#include <chrono>
#include <filesystem>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace ib {
namespace {

namespace fs = std::filesystem;

class ClientSyncTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("ib_client_sync_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
            "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(ClientSyncTest, NoClientPassesARunBeforeTheLastArrives) {
  constexpr int kClients = 3;
  std::atomic<int> arrived{0};
  std::atomic<int> passed_early{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kClients; ++i) {
    threads.emplace_back([&, i] {
      ClientSync sync(dir_, i, kClients, 10'000);
      for (int run = 0; run < 2; ++run) {
        // The last client arrives 100 ms late at each run.
        if (i == kClients - 1) std::this_thread::sleep_for(std::chrono::milliseconds(100));
        arrived.fetch_add(1);
        ASSERT_TRUE(sync.before_run(run, nullptr).ok());
        if (arrived.load() < kClients * (run + 1)) passed_early.fetch_add(1);
      }
      sync.done();
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(passed_early.load(), 0);
  EXPECT_FALSE(fs::exists(dir_ / "failed.0"));
}

TEST_F(ClientSyncTest, AClientThatFailsReleasesTheOthersWithAnError) {
  { ClientSync failing(dir_, 1, 2); }  // left without done(): an error return in the client
  EXPECT_TRUE(fs::exists(dir_ / "failed.1"));
  ClientSync waiting(dir_, 0, 2, 10'000);
  const auto st = waiting.before_run(0, nullptr);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().message.find("client 1 failed"), std::string::npos) << st.error().message;
  waiting.done();
}

TEST_F(ClientSyncTest, AMissingClientTimesOutNamingIt) {
  ClientSync waiting(dir_, 0, 2, 50);
  const auto st = waiting.before_run(0, nullptr);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().message.find("client 1 did not reach run 0"), std::string::npos)
      << st.error().message;
  waiting.done();
}

TEST_F(ClientSyncTest, AStopReleasesTheWait) {
  std::atomic<bool> stop{true};
  ClientSync waiting(dir_, 0, 2, 60'000);
  EXPECT_TRUE(waiting.before_run(0, &stop).ok());
  waiting.done();
}

}  // namespace
}  // namespace ib
