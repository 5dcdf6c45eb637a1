// The local runner against SmolLM2 (skipped when absent): greedy answers, the prefix cache
// and when it may serve, and the context limit.
#include <gtest/gtest.h>

#include "eval/runner.h"
#include "gguf/test_models.h"

namespace sieve::eval {
namespace {

class LocalRunnerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string path = test_model_path("smollm2.gguf");
    if (path.empty()) GTEST_SKIP() << "smollm2.gguf not found";
    auto m = load_model(path);
    ASSERT_TRUE(m.ok()) << m.message();
    model_ = std::move(*m);
    pool_ = std::make_unique<ThreadPool>(2);
  }
  std::unique_ptr<Model> model_;
  std::unique_ptr<ThreadPool> pool_;
};

PolicyPtr policy(const char* name) {
  return std::make_shared<const PolicyConfig>(*make_policy(name));
}

// Reusing a cached prefix must actually reuse (a shared prefix is served from the cache, in
// whole KV pages) and must not change these greedy answers - but only within one policy,
// and never for a policy whose prefill a warm cache could change.
TEST_F(LocalRunnerTest, PrefixCacheReusesPrefixesWithoutChangingAnswers) {
  const Tokenizer& tok = *model_->tokenizer;
  std::string shared;
  for (int i = 0; i < 10; ++i)
    shared += "The grass is green. The sky is blue. The sun is yellow.\n";
  const std::string first =
      shared + "The pass key is 51234. Remember it.\nWhat is the pass key? The pass key is";
  const std::string second =
      shared + "The pass key is 90817. Remember it.\nWhat is the pass key? The pass key is";
  const std::vector<int32_t> ids1 = tok.encode(first, true, false);
  const std::vector<int32_t> ids2 = tok.encode(second, true, false);
  LocalRunnerOptions on{.n_ctx = 256, .n_batch = 128, .prefix_cache = true};
  LocalRunnerOptions off = on;
  off.prefix_cache = false;
  auto cached = make_local_runner(*model_, *pool_, on);
  auto fresh = make_local_runner(*model_, *pool_, off);
  const PolicyPtr dense = policy("dense");

  auto a1 = cached->complete({ids1, first, 8, dense});
  ASSERT_TRUE(a1.ok()) << a1.message();
  EXPECT_EQ(a1->reused_tokens, 0);
  EXPECT_EQ(a1->prefill_tokens, static_cast<int64_t>(ids1.size()));
  EXPECT_DOUBLE_EQ(a1->selected_fraction, 1.0);  // dense reads the whole KV
  auto a2 = cached->complete({ids2, second, 8, dense});
  auto b2 = fresh->complete({ids2, second, 8, dense});
  ASSERT_TRUE(a2.ok() && b2.ok());
  EXPECT_GE(a2->reused_tokens, 128);  // whole 16-token pages of the shared ~150 tokens
  EXPECT_EQ(a2->prefill_tokens + a2->reused_tokens, static_cast<int64_t>(ids2.size()));
  EXPECT_EQ(b2->reused_tokens, 0);
  EXPECT_EQ(a2->text, b2->text);
  EXPECT_EQ(a2->completion_tokens, b2->completion_tokens);
  EXPECT_NE(a2->text.find("90817"), std::string::npos) << a2->text;  // the model reads the key

  // A chunk-selecting prefill (tokenselect) runs cold, and so does the first request after a
  // change of policy; then the cache serves again.
  ASSERT_FALSE(policy_allows_prefix_reuse(policy("tokenselect")));
  auto t = cached->complete({ids2, second, 4, policy("tokenselect")});
  ASSERT_TRUE(t.ok()) << t.message();
  EXPECT_EQ(t->reused_tokens, 0);
  auto d1 = cached->complete({ids1, first, 4, dense});
  ASSERT_TRUE(d1.ok());
  EXPECT_EQ(d1->reused_tokens, 0);
  auto d2 = cached->complete({ids2, second, 4, dense});
  ASSERT_TRUE(d2.ok());
  EXPECT_GE(d2->reused_tokens, 128);
}

TEST_F(LocalRunnerTest, RejectsPromptsBeyondItsContext) {
  auto r = make_local_runner(*model_, *pool_, {.n_ctx = 64, .n_batch = 32, .prefix_cache = true});
  std::vector<int32_t> ids(60, 1);
  auto c = r->complete({ids, "", 10, nullptr});
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.message().find("64"), std::string::npos);
}

}  // namespace
}  // namespace sieve::eval
