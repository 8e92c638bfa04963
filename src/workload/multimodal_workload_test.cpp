// Workloads with images: JSONL lines' "image"/"images" files, --dataset-name random-mm's counts
// and sizes, and the parsers of vLLM's --random-mm-bucket-config and --limit-mm-per-prompt.
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "model/tokenizer.h"
#include "workload/workload.h"

namespace ib {
namespace {

namespace fs = std::filesystem;

class MultimodalDataset : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("ib_mm_workload_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_ / "img");
    for (const char* f : {"img/a.png", "img/b.jpg"}) std::ofstream(dir_ / f) << "bytes";
  }
  void TearDown() override { fs::remove_all(dir_); }

  Result<std::vector<RequestSpec>> load(const std::string& lines, int num_prompts = 3) {
    std::ofstream(dir_ / "data.jsonl") << lines;
    WorkloadOptions o;
    o.dataset_name = "jsonl";
    o.dataset_path = (dir_ / "data.jsonl").string();
    o.num_prompts = num_prompts;
    o.vocab_size = 300;
    return load_jsonl_requests(o, *make_byte_tokenizer());
  }

  fs::path dir_;
};

TEST_F(MultimodalDataset, ImageFieldsResolveAgainstTheDatasetsDirectory) {
  const std::string absolute = (dir_ / "img/b.jpg").string();
  auto reqs = load(R"({"prompt": "one", "image": "img/a.png"}
{"prompt": "two", "images": ["img/a.png", ")" +
                   absolute + R"("]}
{"prompt": "text only"}
)");
  ASSERT_TRUE(reqs.ok()) << reqs.error().message;
  ASSERT_EQ(reqs->size(), 3u);
  ASSERT_EQ((*reqs)[0].images.size(), 1u);
  EXPECT_EQ((*reqs)[0].images[0].path, (dir_ / "img/a.png").string());
  ASSERT_EQ((*reqs)[1].images.size(), 2u);
  EXPECT_EQ((*reqs)[1].images[1].path, absolute);
  EXPECT_TRUE((*reqs)[2].images.empty());
  EXPECT_EQ((*reqs)[0].input_len, 3);  // the text's tokens; the model adds the visual ones
}

TEST_F(MultimodalDataset, BadImageFieldsNameTheLineAndTheFix) {
  const std::map<std::string, std::string> cases = {
      {R"({"prompt": "x", "image": "img/missing.png"})", "is not a file"},
      {R"({"prompt": "x", "images": []})", "non-empty array"},
      {R"({"prompt": "x", "images": "img/a.png"})", "non-empty array"},
      {R"({"prompt": "x", "images": [3]})", "must hold file paths"},
      {R"({"prompt": "x", "image": "img/a.png", "images": ["img/a.png"]})", "not both"},
  };
  for (const auto& [line, expect] : cases) {
    auto reqs = load("{\"prompt\": \"ok\"}\n" + line + "\n");
    ASSERT_FALSE(reqs.ok()) << line;
    EXPECT_NE(reqs.error().message.find("data.jsonl:2"), std::string::npos) << reqs.error().message;
    EXPECT_NE(reqs.error().message.find(expect), std::string::npos) << reqs.error().message;
  }
}

WorkloadOptions random_mm(int base, double ratio, int limit) {
  WorkloadOptions o;
  o.dataset_name = "random-mm";
  o.num_prompts = 400;
  o.input_len = LengthDist::fixed(8);
  o.output_len = LengthDist::fixed(4);
  o.vocab_size = 300;
  o.seed = 3;
  o.random_mm.base_items_per_request = base;
  o.random_mm.num_mm_items_range_ratio = ratio;
  o.random_mm.limit_images = limit;
  o.random_mm.buckets = {{256, 256, 0.25}, {720, 1280, 0.75}};
  return o;
}

TEST(RandomMm, CountsSpreadAroundTheBaseUnderTheLimitAndSizesFollowTheBuckets) {
  auto reqs = make_random_mm_requests(random_mm(2, 0.5, 3));
  ASSERT_TRUE(reqs.ok()) << reqs.error().message;
  std::map<size_t, int> counts;
  int small = 0, images = 0;
  std::set<uint64_t> seeds;
  for (const RequestSpec& r : *reqs) {
    ++counts[r.images.size()];
    EXPECT_EQ(r.prompt_tokens.size(), 8u);
    for (const RequestImage& i : r.images) {
      EXPECT_TRUE(i.path.empty());
      ASSERT_TRUE(i.width_px == 256 || i.width_px == 1280) << i.width_px;
      EXPECT_EQ(i.height_px, i.width_px == 256 ? 256 : 720);
      small += i.width_px == 256;
      ++images;
      seeds.insert(i.seed);
    }
  }
  // base 2, ratio 0.5: 1..3 images, each count about a third of the time.
  EXPECT_EQ(counts.size(), 3u);
  for (size_t n = 1; n <= 3; ++n) EXPECT_GT(counts[n], 100) << n;
  EXPECT_NEAR(static_cast<double>(small) / images, 0.25, 0.05);
  EXPECT_EQ(seeds.size(), static_cast<size_t>(images));  // every image its own pixels

  // The limit caps the counts; the same seed gives the same workload, and the same text as random.
  auto capped = make_random_mm_requests(random_mm(2, 0.5, 2));
  ASSERT_TRUE(capped.ok());
  for (const RequestSpec& r : *capped) EXPECT_LE(r.images.size(), 2u);
  auto again = make_random_mm_requests(random_mm(2, 0.5, 3));
  auto text = make_random_requests(random_mm(2, 0.5, 3));
  ASSERT_TRUE(again.ok() && text.ok());
  for (size_t i = 0; i < reqs->size(); ++i) {
    ASSERT_EQ((*again)[i].images.size(), (*reqs)[i].images.size());
    EXPECT_EQ((*again)[i].prompt_tokens, (*reqs)[i].prompt_tokens);
    EXPECT_EQ((*text)[i].prompt_tokens, (*reqs)[i].prompt_tokens);
  }
}

TEST(RandomMm, RefusesCountsTheLimitCannotHold) {
  auto r = make_random_mm_requests(random_mm(4, 0, 2));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("--random-mm-limit-mm-per-prompt"), std::string::npos)
      << r.error().message;
  EXPECT_FALSE(make_random_mm_requests(random_mm(-1, 0, 2)).ok());
  EXPECT_FALSE(make_random_mm_requests(random_mm(1, 1.5, 2)).ok());
}

TEST(MmBucketConfig, ReadsVllmsDictAndNormalises) {
  auto b = parse_mm_bucket_config("{(256, 256, 1): 1, (720,1280,1):3, (64, 64, 1): 0}");
  ASSERT_TRUE(b.ok()) << b.error().message;
  ASSERT_EQ(b->size(), 2u);  // the zero bucket is dropped
  EXPECT_EQ((*b)[0].height_px, 256);
  EXPECT_DOUBLE_EQ((*b)[0].probability, 0.25);
  EXPECT_EQ((*b)[1].height_px, 720);
  EXPECT_EQ((*b)[1].width_px, 1280);
  EXPECT_DOUBLE_EQ((*b)[1].probability, 0.75);
  const std::map<std::string, std::string> bad = {
      {"(256, 256, 1): 1", "not a {...} mapping"}, {"{(256, 256, 8): 1}", "only images"},
      {"{(256, 256): 1}", "cannot read"},          {"{(256, 256, 1): x}", "cannot read"},
      {"{(0, 256, 1): 1}", "sides must be"},       {"{(256, 256, 1): 0}", "no bucket"},
      {R"({"256,256,1": 1})", "cannot read"},
  };
  for (const auto& [text, expect] : bad) {
    auto r = parse_mm_bucket_config(text);
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_NE(r.error().message.find(expect), std::string::npos) << r.error().message;
  }
}

TEST(LimitMmPerPrompt, ReadsVllmsTwoSpellings) {
  EXPECT_EQ(*parse_limit_mm_per_prompt(R"({"image": 3})", "--limit-mm-per-prompt"), 3);
  EXPECT_EQ(*parse_limit_mm_per_prompt(R"({"image": 255, "video": 0})", "--x"), 255);
  EXPECT_EQ(*parse_limit_mm_per_prompt("image=0", "--limit-mm-per-prompt"), 0);
  for (const char* bad : {R"({"video": 1})", "image=-1", "image=x", "five", R"({"image": 1.5})",
                          "[1]", "image=1001"}) {
    auto r = parse_limit_mm_per_prompt(bad, "--limit-mm-per-prompt");
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.error().message.find("--limit-mm-per-prompt"), std::string::npos);
  }
}

}  // namespace
}  // namespace ib
