// Prefill numerics must not depend on where a prompt is split into chunks: the scheduler
// splits by its token budget, and greedy outputs of a request must not change with the
// other requests around it (issue 10's load test).
#include <gtest/gtest.h>

#include <cstring>

#include "engine/prompt_logits.h"
#include "gguf/test_models.h"

namespace sieve {
namespace {

TEST(Forward, PromptLogitsDoNotDependOnTheChunkSplit) {
  const std::string path = test_model_path("smollm2.gguf");
  if (path.empty()) GTEST_SKIP() << "smollm2.gguf not found";
  auto m = load_model(path);
  ASSERT_TRUE(m.ok()) << m.message();
  const Model& model = **m;
  std::string text;
  for (int i = 0; i < 60; ++i)
    text += "Line " + std::to_string(i) + " of the keeper's log: the lamp was lit at dusk. ";
  std::vector<int32_t> prompt = model.tokenizer->encode(text, true, false);
  prompt.resize(std::min<size_t>(prompt.size(), 600));  // > kAttnSegment: decode splits
  ThreadPool pool(2);
  auto a = prompt_logits(model, pool, prompt, 512);
  ASSERT_TRUE(a.ok());
  const int V = model.hp.n_vocab;
  // A chunk of one token takes the split-K decode path; it merges the same segments in the
  // same order.
  for (int chunk : {304, 97, 1}) {
    if (chunk == 1 && std::getenv("SIEVE_TEST_SHORT")) continue;
    auto b = prompt_logits(model, pool, prompt, chunk);
    ASSERT_TRUE(b.ok());
    ASSERT_EQ(a->size(), b->size());
    for (size_t r = 0; r < prompt.size(); ++r) {
      ASSERT_EQ(0, std::memcmp(a->data() + r * V, b->data() + r * V, V * sizeof(float)))
          << "chunk " << chunk << ": row " << r << " differs";
    }
  }
}

}  // namespace
}  // namespace sieve
