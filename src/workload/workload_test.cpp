#include "workload/workload.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>

namespace ib {
namespace {

// The documented byte fallback (model/tokenizer.h): byte b becomes id b + 3.
class ByteTokenizer : public Tokenizer {
 public:
  std::string name() const override { return "test-bytes"; }
  std::vector<int32_t> encode(std::string_view text) const override {
    std::vector<int32_t> ids;
    for (unsigned char c : text) ids.push_back(static_cast<int32_t>(c) + 3);
    return ids;
  }
  std::string decode(const std::vector<int32_t>&) const override { return ""; }
};

WorkloadOptions options(int vocab = 1000) {
  WorkloadOptions o;
  o.num_prompts = 50;
  o.input_len = LengthDist::fixed(16);
  o.output_len = LengthDist::fixed(8);
  o.vocab_size = vocab;
  o.seed = 11;
  return o;
}

class TempFile {
 public:
  explicit TempFile(const std::string& content) {
    path_ = std::filesystem::temp_directory_path() /
            ("ib_workload_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
             "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".jsonl");
    std::ofstream(path_) << content;
  }
  ~TempFile() { std::filesystem::remove(path_); }
  std::string path() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

TEST(RandomRequests, FixedLengthsAndTokensInRange) {
  auto reqs = make_random_requests(options(100));
  ASSERT_TRUE(reqs.ok()) << reqs.error().message;
  ASSERT_EQ(reqs->size(), 50u);
  std::vector<int> seen(100, 0);
  for (size_t i = 0; i < reqs->size(); ++i) {
    const auto& r = (*reqs)[i];
    EXPECT_EQ(r.id, i);
    EXPECT_EQ(r.input_len, 16);
    EXPECT_EQ(r.output_len, 8);
    ASSERT_EQ(r.prompt_tokens.size(), 16u);
    for (int32_t t : r.prompt_tokens) {
      ASSERT_GE(t, kFirstRandomTokenId);
      ASSERT_LT(t, 100);
      seen[static_cast<size_t>(t)]++;
    }
  }
  // 800 draws over 97 ids: both ends of the range occur.
  EXPECT_GT(seen[3], 0);
  EXPECT_GT(seen[99], 0);
}

TEST(RandomRequests, DeterministicForASeedAndDifferentAcrossSeeds) {
  auto a = make_random_requests(options());
  auto b = make_random_requests(options());
  auto o = options();
  o.seed = 12;
  auto c = make_random_requests(o);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  for (size_t i = 0; i < a->size(); ++i) EXPECT_EQ((*a)[i].prompt_tokens, (*b)[i].prompt_tokens);
  EXPECT_NE((*a)[0].prompt_tokens, (*c)[0].prompt_tokens);
}

TEST(RandomRequests, DrawsLengthsFromDistributions) {
  auto o = options();
  o.num_prompts = 300;
  o.input_len = *parse_length_dist("uniform:min=4,max=12", "--input-len-dist");
  o.output_len = *parse_length_dist("normal:mean=20,std=5,min=10,max=30", "--output-len-dist");
  auto reqs = make_random_requests(o);
  ASSERT_TRUE(reqs.ok());
  std::set<int> input_lens;
  for (const auto& r : *reqs) {
    EXPECT_EQ(static_cast<int>(r.prompt_tokens.size()), r.input_len);
    EXPECT_GE(r.input_len, 4);
    EXPECT_LE(r.input_len, 12);
    EXPECT_GE(r.output_len, 10);
    EXPECT_LE(r.output_len, 30);
    input_lens.insert(r.input_len);
  }
  EXPECT_EQ(input_lens.size(), 9u);
}

TEST(RandomRequests, RejectsNonPositiveCountsAndLengths) {
  auto o = options();
  o.num_prompts = 0;
  EXPECT_NE(make_random_requests(o).error().message.find("--num-prompts"), std::string::npos);
  o = options();
  o.input_len = LengthDist::fixed(-1);
  EXPECT_NE(make_random_requests(o).error().message.find("--input-len"), std::string::npos);
  o = options();
  o.output_len = LengthDist::fixed(0);
  auto r = make_random_requests(o);
  EXPECT_EQ(r.error().kind, ErrorKind::kUser);
  EXPECT_NE(r.error().message.find("--output-len"), std::string::npos);
}

TEST(ContextCheck, NamesBothNumbers) {
  auto reqs = make_random_requests(options());
  ASSERT_TRUE(reqs.ok());
  EXPECT_TRUE(check_context_fits(*reqs, 24, "m").ok());
  auto s = check_context_fits(*reqs, 23, "tiny");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().kind, ErrorKind::kUser);
  EXPECT_NE(s.error().message.find("24 tokens"), std::string::npos) << s.error().message;
  EXPECT_NE(s.error().message.find("allows 23"), std::string::npos) << s.error().message;
}

// A calibration prompt and the token it generates fit the context, or the first that does not
// is named.
TEST(ContextCheck, CalibrationPromptsFitWithTheirGeneratedToken) {
  const std::vector<std::vector<int32_t>> prompts = {{1, 2}, {1, 2, 3, 4}};
  EXPECT_TRUE(check_prompts_fit(prompts, 5, "m", "p.jsonl").ok());
  const Status s = check_prompts_fit(prompts, 4, "tiny", "p.jsonl");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().kind, ErrorKind::kUser);
  EXPECT_NE(s.error().message.find("calibration prompt 2 of p.jsonl has 4 tokens, beyond tiny's "
                                   "context of 4"),
            std::string::npos)
      << s.error().message;
}

TEST(JsonlDataset, ReadsTextAndTokenIdsWithOutputLengths) {
  TempFile f(
      "{\"prompt\": \"hi!\"}\n"
      "\n"
      "{\"prompt_token_ids\": [5, 6, 7, 8], \"output_len\": 3}\n");
  auto o = options();
  o.dataset_name = "jsonl";
  o.dataset_path = f.path();
  o.num_prompts = 5;
  ByteTokenizer tok;
  auto reqs = load_jsonl_requests(o, tok);
  ASSERT_TRUE(reqs.ok()) << reqs.error().message;
  ASSERT_EQ(reqs->size(), 5u);
  EXPECT_EQ((*reqs)[0].prompt_tokens, (std::vector<int32_t>{'h' + 3, 'i' + 3, '!' + 3}));
  EXPECT_EQ((*reqs)[0].prompt_text, "hi!");
  EXPECT_EQ((*reqs)[0].output_len, 8);  // from --output-len
  EXPECT_EQ((*reqs)[1].prompt_tokens, (std::vector<int32_t>{5, 6, 7, 8}));
  EXPECT_EQ((*reqs)[1].input_len, 4);
  EXPECT_EQ((*reqs)[1].output_len, 3);
  // Fewer lines than prompts: reused in order.
  EXPECT_EQ((*reqs)[2].prompt_tokens, (*reqs)[0].prompt_tokens);
  EXPECT_EQ((*reqs)[3].prompt_tokens, (*reqs)[1].prompt_tokens);
  EXPECT_EQ((*reqs)[4].id, 4u);
}

TEST(JsonlDataset, MalformedLinesNameFileLineAndProblem) {
  struct Case {
    std::string content;
    std::string line;
    std::string problem;
  };
  const std::vector<Case> cases = {
      {"{\"prompt\": \"a\"}\n{\"prompt\": \n", ":2:", "not valid JSON"},
      {"[1, 2]\n", ":1:", "expected an object"},
      {"{\"text\": \"a\"}\n", ":1:", "needs \"prompt\""},
      {"{\"prompt\": \"\"}\n", ":1:", "non-empty string"},
      {"{\"prompt_token_ids\": [1, 5000]}\n", ":1:", "token id 5000"},
      {"{\"prompt_token_ids\": []}\n", ":1:", "non-empty array"},
      {"\n\n{\"prompt\": \"a\", \"output_len\": 0}\n", ":3:", "output_len"},
      {"{\"prompt\": \"a\", \"output_len\": \"ten\"}\n", ":1:", "output_len"},
  };
  ByteTokenizer tok;
  for (const auto& c : cases) {
    TempFile f(c.content);
    auto o = options();
    o.dataset_name = "jsonl";
    o.dataset_path = f.path();
    auto r = load_jsonl_requests(o, tok);
    ASSERT_FALSE(r.ok()) << c.content;
    EXPECT_EQ(r.error().kind, ErrorKind::kUser);
    EXPECT_NE(r.error().message.find(f.path() + c.line), std::string::npos) << r.error().message;
    EXPECT_NE(r.error().message.find(c.problem), std::string::npos) << r.error().message;
    EXPECT_EQ(r.error().message.find('\n'), std::string::npos) << r.error().message;
  }
}

TEST(JsonlDataset, MissingOrEmptyFileIsAUserError) {
  ByteTokenizer tok;
  auto o = options();
  o.dataset_name = "jsonl";
  o.dataset_path = "/nonexistent/ib/data.jsonl";
  auto r = load_jsonl_requests(o, tok);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().kind, ErrorKind::kUser);
  EXPECT_NE(r.error().message.find("--dataset-path"), std::string::npos);

  TempFile empty("\n  \n");
  o.dataset_path = empty.path();
  r = load_jsonl_requests(o, tok);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("no prompts"), std::string::npos);

  o.dataset_path.clear();
  r = load_jsonl_requests(o, tok);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("--dataset-path"), std::string::npos);
}

TEST(DatasetPrompts, AreTheFirstPromptsOfTheFileTokenizedAsTheRequests) {
  TempFile f(
      "{\"prompt\": \"hi!\"}\n"
      "\n"
      "{\"prompt_token_ids\": [5, 6, 7, 8], \"output_len\": 3}\n"
      "{\"prompt\": \"third\"}\n");
  auto o = options();
  o.dataset_name = "jsonl";
  o.dataset_path = f.path();
  o.num_prompts = 1;  // the file, not the run's count, bounds them
  ByteTokenizer tok;
  auto prompts = dataset_prompts(o, tok, 2);
  ASSERT_TRUE(prompts.ok()) << prompts.error().message;
  o.num_prompts = 3;
  auto reqs = load_jsonl_requests(o, tok);
  ASSERT_TRUE(reqs.ok());
  ASSERT_EQ(prompts->size(), 2u);
  EXPECT_EQ((*prompts)[0], (*reqs)[0].prompt_tokens);
  EXPECT_EQ((*prompts)[1], (*reqs)[1].prompt_tokens);
  EXPECT_TRUE(dataset_prompts(o, tok, 3).ok());
}

TEST(DatasetPrompts, AreRefusedWithoutADatasetOrBeyondIt) {
  TempFile f("{\"prompt\": \"a\"}\n{\"prompt\": \"b\"}\n");
  ByteTokenizer tok;
  auto o = options();  // random token ids: no prompts of its own
  auto none = dataset_prompts(o, tok, 2);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.error().kind, ErrorKind::kUser);
  EXPECT_NE(none.error().message.find("--dataset-name jsonl --dataset-path"), std::string::npos)
      << none.error().message;
  o.dataset_name = "jsonl";
  o.dataset_path = f.path();
  for (int count : {0, 3}) {
    auto r = dataset_prompts(o, tok, count);
    ASSERT_FALSE(r.ok()) << count;
    EXPECT_NE(r.error().message.find("holds 2 prompts; use 1 to 2"), std::string::npos)
        << r.error().message;
  }
}

}  // namespace
}  // namespace ib
